//! Compiles the AST to bytecode for the stack VM.
//!
//! Every function gets a fixed number of local slots on the VM stack (parameters first),
//! with temporaries pushed above them. Locals that some nested function refers to are
//! boxed into shared cells so closures can capture (and mutate) them.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use crate::ast::{BinOp, CompileError, Expr, ExprKind, FuncDef, Stmt, StmtKind, UnOp};
use crate::builtins::Builtin;
use crate::value::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Const(u32),
    Int(i32),
    Nil,
    True,
    False,
    Pop,
    GetLocal(u16),
    SetLocal(u16),
    /// Moves the value in a local slot into a fresh cell.
    BoxLocal(u16),
    GetCell(u16),
    SetCell(u16),
    GetUpval(u16),
    SetUpval(u16),
    GetGlobal(u32),
    SetGlobal(u32),
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Neg,
    Not,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Jump(u32),
    JumpIfFalse(u32),
    /// `and`: jump keeping the value if it is falsy, otherwise pop it.
    JumpIfFalseOrPop(u32),
    /// `or`: jump keeping the value if it is truthy, otherwise pop it.
    JumpIfTrueOrPop(u32),
    Call(u8),
    CallBuiltin(Builtin, u8),
    Return,
    Closure(u32),
    MakeList(u32),
    MakeMap(u32),
    Index,
    SetIndex,
    /// Pops a collection into slot `n` (as a list) and sets slot `n + 1` to 0.
    ForPrep(u16),
    /// Pushes the next element of the list in slot `n`, or jumps when it is exhausted.
    ForIter(u16, u32),
}

/// Where a closure finds a captured variable when it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// A cell in a local slot of the enclosing function.
    Local(u16),
    /// One of the enclosing function's own captures.
    Upval(u16),
}

/// A compiled function.
#[derive(Debug, Default)]
pub struct Proto {
    pub name: String,
    pub arity: u8,
    pub num_slots: usize,
    pub code: Vec<Op>,
    pub lines: Vec<u32>,
    pub consts: Vec<Value>,
    pub protos: Vec<Rc<Proto>>,
    pub captures: Vec<Capture>,
}

/// A compiled program: the top-level code plus the names of its global variables.
#[derive(Debug)]
pub struct Program {
    pub main: Rc<Proto>,
    pub globals: Vec<String>,
}

struct Local {
    name: String,
    cell: bool,
}

struct LoopCtx {
    continue_at: usize,
    breaks: Vec<usize>,
}

struct FnState {
    proto: Proto,
    locals: Vec<Local>,
    scopes: Vec<usize>,
    capture_names: Vec<String>,
    /// Names referenced from nested functions: locals with these names get cells.
    captured: BTreeSet<String>,
    loops: Vec<LoopCtx>,
}

enum VarRef {
    Local(u16, bool),
    Upval(u16),
    Global(u32),
    Builtin(Builtin),
}

pub fn compile(stmts: &[Stmt]) -> Result<Program, CompileError> {
    let mut c = Compiler {
        fns: Vec::new(),
        globals: BTreeMap::new(),
        global_names: Vec::new(),
    };
    for s in stmts {
        match &s.kind {
            StmtKind::Let(name, _) => c.global(name),
            StmtKind::Fn(def) => c.global(&def.name),
            _ => 0,
        };
    }
    let mut captured = BTreeSet::new();
    collect_nested(stmts, false, &mut captured);
    c.fns.push(FnState::new("<script>", 0, captured));
    for s in stmts {
        c.stmt(s)?;
    }
    let last = stmts.last().map_or(1, |s| s.line);
    c.emit(Op::Nil, last);
    c.emit(Op::Return, last);
    let state = c.fns.pop().expect("script state");
    Ok(Program {
        main: Rc::new(state.proto),
        globals: c.global_names,
    })
}

/// Collects every name used inside nested function bodies (an over-approximation of
/// the variables that closures capture).
fn collect_nested(stmts: &[Stmt], nested: bool, out: &mut BTreeSet<String>) {
    for s in stmts {
        match &s.kind {
            StmtKind::Let(_, e) | StmtKind::Expr(e) | StmtKind::Return(Some(e)) => {
                expr_names(e, nested, out)
            }
            StmtKind::Assign(t, e) => {
                expr_names(t, nested, out);
                expr_names(e, nested, out);
            }
            StmtKind::If(c, a, b) => {
                expr_names(c, nested, out);
                collect_nested(a, nested, out);
                if let Some(b) = b {
                    collect_nested(b, nested, out);
                }
            }
            StmtKind::While(c, body) | StmtKind::For(_, c, body) => {
                expr_names(c, nested, out);
                collect_nested(body, nested, out);
            }
            StmtKind::Fn(def) => collect_nested(&def.body, true, out),
            StmtKind::Block(body) => collect_nested(body, nested, out),
            StmtKind::Return(None) | StmtKind::Break | StmtKind::Continue => {}
        }
    }
}

fn expr_names(e: &Expr, nested: bool, out: &mut BTreeSet<String>) {
    match &e.kind {
        ExprKind::Var(name) if nested => {
            out.insert(name.clone());
        }
        ExprKind::List(items) => items.iter().for_each(|i| expr_names(i, nested, out)),
        ExprKind::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            expr_names(k, nested, out);
            expr_names(v, nested, out);
        }),
        ExprKind::Unary(_, x) => expr_names(x, nested, out),
        ExprKind::Binary(_, a, b) | ExprKind::Logic(_, a, b) | ExprKind::Index(a, b) => {
            expr_names(a, nested, out);
            expr_names(b, nested, out);
        }
        ExprKind::Call(f, args) => {
            expr_names(f, nested, out);
            args.iter().for_each(|a| expr_names(a, nested, out));
        }
        ExprKind::Func(def) => collect_nested(&def.body, true, out),
        _ => {}
    }
}

impl FnState {
    fn new(name: &str, arity: u8, captured: BTreeSet<String>) -> Self {
        FnState {
            proto: Proto {
                name: name.to_string(),
                arity,
                ..Proto::default()
            },
            locals: Vec::new(),
            scopes: Vec::new(),
            capture_names: Vec::new(),
            captured,
            loops: Vec::new(),
        }
    }

    fn find_local(&self, name: &str) -> Option<(u16, bool)> {
        self.locals
            .iter()
            .rposition(|l| l.name == name)
            .map(|i| (i as u16, self.locals[i].cell))
    }
}

struct Compiler {
    fns: Vec<FnState>,
    globals: BTreeMap<String, u32>,
    global_names: Vec<String>,
}

type CResult = Result<(), CompileError>;

impl Compiler {
    fn global(&mut self, name: &str) -> u32 {
        if let Some(&g) = self.globals.get(name) {
            return g;
        }
        let g = self.global_names.len() as u32;
        self.globals.insert(name.to_string(), g);
        self.global_names.push(name.to_string());
        g
    }

    fn cur(&mut self) -> &mut FnState {
        self.fns.last_mut().expect("function state")
    }

    fn emit(&mut self, op: Op, line: u32) -> usize {
        let p = &mut self.cur().proto;
        p.code.push(op);
        p.lines.push(line);
        p.code.len() - 1
    }

    fn here(&mut self) -> usize {
        self.cur().proto.code.len()
    }

    /// Points the jump at `at` to the current end of the code.
    fn patch(&mut self, at: usize) {
        let target = self.here() as u32;
        match &mut self.cur().proto.code[at] {
            Op::Jump(t)
            | Op::JumpIfFalse(t)
            | Op::JumpIfFalseOrPop(t)
            | Op::JumpIfTrueOrPop(t)
            | Op::ForIter(_, t) => *t = target,
            other => unreachable!("patching a non-jump {other:?}"),
        }
    }

    fn constant(&mut self, v: Value, line: u32) -> Result<u32, CompileError> {
        let consts = &mut self.cur().proto.consts;
        if let Value::Str(s) = &v {
            if let Some(i) = consts
                .iter()
                .position(|c| matches!(c, Value::Str(t) if t == s))
            {
                return Ok(i as u32);
            }
        }
        if consts.len() >= u32::MAX as usize {
            return Err(CompileError::new("too many constants", line, 0));
        }
        consts.push(v);
        Ok(consts.len() as u32 - 1)
    }

    fn at_global_scope(&self) -> bool {
        self.fns.len() == 1 && self.fns[0].scopes.is_empty()
    }

    fn declare_local(&mut self, name: &str, line: u32) -> Result<(u16, bool), CompileError> {
        let f = self.cur();
        let slot = f.locals.len();
        if slot >= u16::MAX as usize - 1 {
            return Err(CompileError::new("too many local variables", line, 0));
        }
        let cell = f.captured.contains(name);
        f.locals.push(Local {
            name: name.to_string(),
            cell,
        });
        f.proto.num_slots = f.proto.num_slots.max(f.locals.len());
        Ok((slot as u16, cell))
    }

    /// Stores the value on top of the stack into a freshly declared local.
    fn init_local(&mut self, name: &str, line: u32) -> CResult {
        let (slot, cell) = self.declare_local(name, line)?;
        self.emit(Op::SetLocal(slot), line);
        if cell {
            self.emit(Op::BoxLocal(slot), line);
        }
        Ok(())
    }

    fn begin_scope(&mut self) {
        let f = self.cur();
        f.scopes.push(f.locals.len());
    }

    fn end_scope(&mut self) {
        let f = self.cur();
        let n = f.scopes.pop().expect("scope");
        f.locals.truncate(n);
    }

    fn resolve(&mut self, name: &str) -> Option<VarRef> {
        let top = self.fns.len() - 1;
        if let Some((slot, cell)) = self.fns[top].find_local(name) {
            return Some(VarRef::Local(slot, cell));
        }
        if let Some(u) = self.resolve_upval(top, name) {
            return Some(VarRef::Upval(u));
        }
        if let Some(&g) = self.globals.get(name) {
            return Some(VarRef::Global(g));
        }
        Builtin::lookup(name).map(VarRef::Builtin)
    }

    fn resolve_upval(&mut self, level: usize, name: &str) -> Option<u16> {
        if level == 0 {
            return None;
        }
        if let Some(i) = self.fns[level].capture_names.iter().position(|n| n == name) {
            return Some(i as u16);
        }
        let cap = match self.fns[level - 1].find_local(name) {
            Some((slot, cell)) => {
                debug_assert!(cell, "captured local '{name}' was not boxed");
                Capture::Local(slot)
            }
            None => Capture::Upval(self.resolve_upval(level - 1, name)?),
        };
        let f = &mut self.fns[level];
        f.capture_names.push(name.to_string());
        f.proto.captures.push(cap);
        Some(f.proto.captures.len() as u16 - 1)
    }

    fn block(&mut self, stmts: &[Stmt]) -> CResult {
        self.begin_scope();
        for s in stmts {
            self.stmt(s)?;
        }
        self.end_scope();
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> CResult {
        let line = s.line;
        match &s.kind {
            StmtKind::Let(name, value) => {
                self.expr(value)?;
                if self.at_global_scope() {
                    let g = self.global(name);
                    self.emit(Op::SetGlobal(g), line);
                } else {
                    self.init_local(name, line)?;
                }
            }
            StmtKind::Assign(target, value) => match &target.kind {
                ExprKind::Var(name) => {
                    self.expr(value)?;
                    self.store_var(name, line)?;
                }
                ExprKind::Index(obj, idx) => {
                    self.expr(obj)?;
                    self.expr(idx)?;
                    self.expr(value)?;
                    self.emit(Op::SetIndex, line);
                }
                _ => return Err(CompileError::new("invalid assignment target", line, 0)),
            },
            StmtKind::Expr(e) => {
                self.expr(e)?;
                self.emit(Op::Pop, line);
            }
            StmtKind::If(cond, then, otherwise) => {
                self.expr(cond)?;
                let skip_then = self.emit(Op::JumpIfFalse(0), line);
                self.block(then)?;
                match otherwise {
                    Some(other) => {
                        let skip_else = self.emit(Op::Jump(0), line);
                        self.patch(skip_then);
                        self.block(other)?;
                        self.patch(skip_else);
                    }
                    None => self.patch(skip_then),
                }
            }
            StmtKind::While(cond, body) => {
                let start = self.here();
                self.expr(cond)?;
                let exit = self.emit(Op::JumpIfFalse(0), line);
                self.cur().loops.push(LoopCtx {
                    continue_at: start,
                    breaks: Vec::new(),
                });
                self.block(body)?;
                self.emit(Op::Jump(start as u32), line);
                self.patch(exit);
                self.end_loop();
            }
            StmtKind::For(name, seq, body) => {
                self.begin_scope();
                self.expr(seq)?;
                let (slot, _) = self.declare_local("$seq", line)?;
                self.declare_local("$idx", line)?;
                self.emit(Op::ForPrep(slot), line);
                let top = self.here();
                let iter = self.emit(Op::ForIter(slot, 0), line);
                self.cur().loops.push(LoopCtx {
                    continue_at: top,
                    breaks: Vec::new(),
                });
                self.begin_scope();
                self.init_local(name, line)?;
                for s in body {
                    self.stmt(s)?;
                }
                self.end_scope();
                self.emit(Op::Jump(top as u32), line);
                self.patch(iter);
                self.end_loop();
                self.end_scope();
            }
            StmtKind::Fn(def) => {
                if self.at_global_scope() {
                    self.function(def)?;
                    let g = self.global(&def.name);
                    self.emit(Op::SetGlobal(g), line);
                } else {
                    // Declare first so the function can call itself.
                    let (slot, cell) = self.declare_local(&def.name, line)?;
                    if cell {
                        self.emit(Op::Nil, line);
                        self.emit(Op::SetLocal(slot), line);
                        self.emit(Op::BoxLocal(slot), line);
                        self.function(def)?;
                        self.emit(Op::SetCell(slot), line);
                    } else {
                        self.function(def)?;
                        self.emit(Op::SetLocal(slot), line);
                    }
                }
            }
            StmtKind::Return(value) => {
                match value {
                    Some(e) => self.expr(e)?,
                    None => {
                        self.emit(Op::Nil, line);
                    }
                }
                self.emit(Op::Return, line);
            }
            StmtKind::Break => {
                let j = self.emit(Op::Jump(0), line);
                match self.cur().loops.last_mut() {
                    Some(l) => l.breaks.push(j),
                    None => return Err(CompileError::new("'break' outside of a loop", line, 0)),
                }
            }
            StmtKind::Continue => {
                let Some(target) = self.cur().loops.last().map(|l| l.continue_at) else {
                    return Err(CompileError::new("'continue' outside of a loop", line, 0));
                };
                self.emit(Op::Jump(target as u32), line);
            }
            StmtKind::Block(body) => self.block(body)?,
        }
        Ok(())
    }

    fn end_loop(&mut self) {
        let l = self.cur().loops.pop().expect("loop");
        for b in l.breaks {
            self.patch(b);
        }
    }

    fn function(&mut self, def: &FuncDef) -> CResult {
        let mut captured = BTreeSet::new();
        collect_nested(&def.body, false, &mut captured);
        self.fns
            .push(FnState::new(&def.name, def.params.len() as u8, captured));
        for p in &def.params {
            let (slot, cell) = self.declare_local(p, def.line)?;
            if cell {
                self.emit(Op::BoxLocal(slot), def.line);
            }
        }
        for s in &def.body {
            self.stmt(s)?;
        }
        let last = def.body.last().map_or(def.line, |s| s.line);
        self.emit(Op::Nil, last);
        self.emit(Op::Return, last);
        let state = self.fns.pop().expect("function state");
        let protos = &mut self.cur().proto.protos;
        protos.push(Rc::new(state.proto));
        let idx = protos.len() as u32 - 1;
        self.emit(Op::Closure(idx), def.line);
        Ok(())
    }

    fn load_var(&mut self, name: &str, line: u32) -> CResult {
        let op = match self.resolve(name) {
            Some(VarRef::Local(slot, false)) => Op::GetLocal(slot),
            Some(VarRef::Local(slot, true)) => Op::GetCell(slot),
            Some(VarRef::Upval(i)) => Op::GetUpval(i),
            Some(VarRef::Global(g)) => Op::GetGlobal(g),
            Some(VarRef::Builtin(b)) => Op::Const(self.constant(Value::Builtin(b), line)?),
            None => {
                return Err(CompileError::new(
                    format!("undefined variable '{name}'"),
                    line,
                    0,
                ))
            }
        };
        self.emit(op, line);
        Ok(())
    }

    fn store_var(&mut self, name: &str, line: u32) -> CResult {
        let op = match self.resolve(name) {
            Some(VarRef::Local(slot, false)) => Op::SetLocal(slot),
            Some(VarRef::Local(slot, true)) => Op::SetCell(slot),
            Some(VarRef::Upval(i)) => Op::SetUpval(i),
            Some(VarRef::Global(g)) => Op::SetGlobal(g),
            Some(VarRef::Builtin(_)) => {
                return Err(CompileError::new(
                    format!("cannot assign to builtin '{name}'"),
                    line,
                    0,
                ))
            }
            None => {
                return Err(CompileError::new(
                    format!("undefined variable '{name}'"),
                    line,
                    0,
                ))
            }
        };
        self.emit(op, line);
        Ok(())
    }

    fn expr(&mut self, e: &Expr) -> CResult {
        let line = e.line;
        match &e.kind {
            ExprKind::Int(n) => {
                let op = match i32::try_from(*n) {
                    Ok(small) => Op::Int(small),
                    Err(_) => Op::Const(self.constant(Value::Int(*n), line)?),
                };
                self.emit(op, line);
            }
            ExprKind::Str(s) => {
                let k = self.constant(Value::str(s), line)?;
                self.emit(Op::Const(k), line);
            }
            ExprKind::Bool(b) => {
                self.emit(if *b { Op::True } else { Op::False }, line);
            }
            ExprKind::Nil => {
                self.emit(Op::Nil, line);
            }
            ExprKind::Var(name) => self.load_var(name, line)?,
            ExprKind::List(items) => {
                for item in items {
                    self.expr(item)?;
                }
                self.emit(Op::MakeList(items.len() as u32), line);
            }
            ExprKind::Map(pairs) => {
                for (k, v) in pairs {
                    self.expr(k)?;
                    self.expr(v)?;
                }
                self.emit(Op::MakeMap(pairs.len() as u32), line);
            }
            ExprKind::Unary(op, x) => {
                self.expr(x)?;
                self.emit(if *op == UnOp::Neg { Op::Neg } else { Op::Not }, line);
            }
            ExprKind::Binary(op, a, b) => {
                self.expr(a)?;
                self.expr(b)?;
                let op = match op {
                    BinOp::Add => Op::Add,
                    BinOp::Sub => Op::Sub,
                    BinOp::Mul => Op::Mul,
                    BinOp::Div => Op::Div,
                    BinOp::Mod => Op::Mod,
                    BinOp::Eq => Op::Eq,
                    BinOp::Ne => Op::Ne,
                    BinOp::Lt => Op::Lt,
                    BinOp::Le => Op::Le,
                    BinOp::Gt => Op::Gt,
                    BinOp::Ge => Op::Ge,
                };
                self.emit(op, line);
            }
            ExprKind::Logic(is_and, a, b) => {
                self.expr(a)?;
                let j = self.emit(
                    if *is_and {
                        Op::JumpIfFalseOrPop(0)
                    } else {
                        Op::JumpIfTrueOrPop(0)
                    },
                    line,
                );
                self.expr(b)?;
                self.patch(j);
            }
            ExprKind::Call(callee, args) => {
                let builtin = match &callee.kind {
                    ExprKind::Var(name) => match self.resolve(name) {
                        Some(VarRef::Builtin(b)) => Some(b),
                        _ => None,
                    },
                    _ => None,
                };
                if builtin.is_none() {
                    self.expr(callee)?;
                }
                for a in args {
                    self.expr(a)?;
                }
                let argc = args.len() as u8;
                self.emit(
                    builtin.map_or(Op::Call(argc), |b| Op::CallBuiltin(b, argc)),
                    line,
                );
            }
            ExprKind::Index(obj, idx) => {
                self.expr(obj)?;
                self.expr(idx)?;
                self.emit(Op::Index, line);
            }
            ExprKind::Func(def) => self.function(def)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse;

    #[test]
    fn boxes_only_captured_locals() {
        let prog =
            compile(&parse("fn f(a, b) { let c = 1; return fn() { return b + c; }; }").unwrap())
                .unwrap();
        let f = &prog.main.protos[0];
        assert_eq!(f.arity, 2);
        assert!(f.code.contains(&Op::BoxLocal(1)));
        assert!(!f.code.contains(&Op::BoxLocal(0)));
        assert_eq!(
            f.protos[0].captures,
            vec![Capture::Local(1), Capture::Local(2)]
        );
    }

    #[test]
    fn rejects_bad_programs() {
        let err = |src: &str| compile(&parse(src).unwrap()).unwrap_err().message;
        assert!(err("print(nope);").contains("undefined variable 'nope'"));
        assert!(err("break;").contains("outside of a loop"));
        assert!(err("len = 3;").contains("builtin"));
    }
}
