//! The bytecode interpreter: one big `match` over the opcodes.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write as _;
use std::rc::Rc;

use crate::builtins;
use crate::compiler::{Capture, Op, Program};
use crate::value::{self, Closure, Key, Value};

/// Deepest call nesting before a "stack overflow" error.
const MAX_FRAMES: usize = 10_000;
/// Deepest nesting of native re-entry (builtins such as `sort` calling back into code).
const MAX_NATIVE_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeError {
    pub message: String,
    /// Source line of the failing instruction; 0 while not yet known.
    pub line: u32,
    pub function: String,
}

impl RuntimeError {
    pub fn new(message: impl Into<String>) -> Self {
        RuntimeError {
            message: message.into(),
            line: 0,
            function: String::new(),
        }
    }
}

impl From<String> for RuntimeError {
    fn from(message: String) -> Self {
        RuntimeError::new(message)
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "runtime error: {}", self.message)?;
        if self.line > 0 {
            write!(f, " (line {}, in {})", self.line, self.function)?;
        }
        Ok(())
    }
}

impl std::error::Error for RuntimeError {}

struct Frame {
    clo: Rc<Closure>,
    ip: usize,
    base: usize,
}

pub struct Vm {
    stack: Vec<Value>,
    frames: Vec<Frame>,
    globals: Vec<Value>,
    output: String,
    echo: bool,
    instructions: u64,
    native_depth: usize,
    files: BTreeMap<String, String>,
    args: Vec<String>,
}

impl Default for Vm {
    fn default() -> Self {
        Vm::new()
    }
}

/// Unwraps an operation result, turning an error into a located `RuntimeError`.
macro_rules! check {
    ($vm:ident, $clo:ident, $ip:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Err($vm.locate(&$clo, $ip, RuntimeError::from(e))),
        }
    };
}

impl Vm {
    pub fn new() -> Self {
        Vm {
            stack: Vec::with_capacity(1024),
            frames: Vec::with_capacity(64),
            globals: Vec::new(),
            output: String::new(),
            echo: false,
            instructions: 0,
            native_depth: 0,
            files: BTreeMap::new(),
            args: Vec::new(),
        }
    }

    /// When on, output goes to stdout (in chunks) instead of being collected.
    pub fn set_echo(&mut self, echo: bool) {
        self.echo = echo;
    }

    /// Serves `read_file(path)` from memory instead of the file system.
    pub fn add_file(&mut self, path: &str, contents: &str) {
        self.files.insert(path.to_string(), contents.to_string());
    }

    pub fn set_args(&mut self, args: Vec<String>) {
        self.args = args;
    }

    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Total number of instructions executed by this VM so far.
    pub fn instructions(&self) -> u64 {
        self.instructions
    }

    pub fn read_file(&self, path: &str) -> std::io::Result<String> {
        match self.files.get(path) {
            Some(text) => Ok(text.clone()),
            None => std::fs::read_to_string(path),
        }
    }

    pub fn write_out(&mut self, s: &str) {
        self.output.push_str(s);
        if self.echo && self.output.len() >= 1 << 14 {
            self.flush();
        }
    }

    /// Writes pending output to stdout (echo mode only).
    pub fn flush(&mut self) {
        if self.echo {
            let mut out = std::io::stdout().lock();
            // A closed pipe is not the program's fault; drop the output.
            let _ = out.write_all(self.output.as_bytes());
            let _ = out.flush();
            self.output.clear();
        }
    }

    /// Returns (and clears) the collected output.
    pub fn take_output(&mut self) -> String {
        std::mem::take(&mut self.output)
    }

    /// Runs a compiled program from the start with fresh globals.
    pub fn run(&mut self, program: &Program) -> Result<Value, RuntimeError> {
        self.globals = vec![Value::Nil; program.globals.len()];
        self.stack.clear();
        self.frames.clear();
        let clo = Rc::new(Closure {
            proto: program.main.clone(),
            upvals: Vec::new(),
        });
        self.stack.push(Value::Func(clo.clone()));
        self.stack.resize(1 + clo.proto.num_slots, Value::Nil);
        self.frames.push(Frame {
            clo,
            ip: 0,
            base: 1,
        });
        let result = self.execute(0);
        if result.is_err() {
            self.stack.clear();
            self.frames.clear();
        }
        self.flush();
        result
    }

    /// Calls a function value from native code (used by `sort` with a comparator).
    pub fn call_value(&mut self, f: &Value, args: Vec<Value>) -> Result<Value, RuntimeError> {
        match f {
            Value::Func(c) => {
                if self.native_depth >= MAX_NATIVE_DEPTH {
                    return Err(RuntimeError::new("native call depth exceeded"));
                }
                let callee = self.stack.len();
                self.stack.push(f.clone());
                let argc = args.len();
                self.stack.extend(args);
                self.enter(c.clone(), callee, argc)?;
                self.native_depth += 1;
                let depth = self.frames.len() - 1;
                let result = self.execute(depth);
                self.native_depth -= 1;
                result
            }
            Value::Builtin(b) => builtins::call(self, *b, args),
            other => Err(RuntimeError::new(format!(
                "cannot call {}",
                other.type_name()
            ))),
        }
    }

    /// Pushes a frame for closure `c` whose callee value sits at `callee` on the stack.
    fn enter(&mut self, c: Rc<Closure>, callee: usize, argc: usize) -> Result<(), RuntimeError> {
        if c.proto.arity as usize != argc {
            let msg = format!(
                "{} expects {} argument(s), got {argc}",
                c.proto.name, c.proto.arity
            );
            return Err(RuntimeError::new(msg));
        }
        if self.frames.len() >= MAX_FRAMES {
            return Err(RuntimeError::new("stack overflow (recursion too deep)"));
        }
        let base = callee + 1;
        self.stack.resize(base + c.proto.num_slots, Value::Nil);
        self.frames.push(Frame {
            clo: c,
            ip: 0,
            base,
        });
        Ok(())
    }

    fn locate(&self, clo: &Closure, ip: usize, mut e: RuntimeError) -> RuntimeError {
        if e.line == 0 {
            e.line = clo
                .proto
                .lines
                .get(ip.wrapping_sub(1))
                .copied()
                .unwrap_or(0);
            e.function = clo.proto.name.clone();
        }
        e
    }

    #[inline]
    fn pop(&mut self) -> Value {
        self.stack.pop().unwrap_or(Value::Nil)
    }

    #[inline]
    fn pop2(&mut self) -> (Value, Value) {
        let b = self.pop();
        let a = self.pop();
        (a, b)
    }

    /// Runs until the frame count drops to `stop`, returning that frame's result.
    fn execute(&mut self, stop: usize) -> Result<Value, RuntimeError> {
        let (mut clo, mut ip, mut base) = {
            let f = self.frames.last().expect("no frame to run");
            (f.clo.clone(), f.ip, f.base)
        };
        loop {
            let op = clo.proto.code[ip];
            ip += 1;
            self.instructions += 1;
            match op {
                Op::Const(k) => {
                    let v = clo.proto.consts[k as usize].clone();
                    self.stack.push(v);
                }
                Op::Int(n) => self.stack.push(Value::Int(i64::from(n))),
                Op::Nil => self.stack.push(Value::Nil),
                Op::True => self.stack.push(Value::Bool(true)),
                Op::False => self.stack.push(Value::Bool(false)),
                Op::Pop => {
                    self.stack.pop();
                }
                Op::GetLocal(s) => {
                    let v = self.stack[base + s as usize].clone();
                    self.stack.push(v);
                }
                Op::SetLocal(s) => {
                    let v = self.pop();
                    self.stack[base + s as usize] = v;
                }
                Op::BoxLocal(s) => {
                    let slot = &mut self.stack[base + s as usize];
                    let v = std::mem::replace(slot, Value::Nil);
                    *slot = Value::Cell(Rc::new(RefCell::new(v)));
                }
                Op::GetCell(s) => {
                    let v = match &self.stack[base + s as usize] {
                        Value::Cell(c) => c.borrow().clone(),
                        _ => {
                            return Err(self.locate(
                                &clo,
                                ip,
                                RuntimeError::new("internal error: not a cell"),
                            ))
                        }
                    };
                    self.stack.push(v);
                }
                Op::SetCell(s) => {
                    let v = self.pop();
                    match &self.stack[base + s as usize] {
                        Value::Cell(c) => *c.borrow_mut() = v,
                        _ => {
                            return Err(self.locate(
                                &clo,
                                ip,
                                RuntimeError::new("internal error: not a cell"),
                            ))
                        }
                    }
                }
                Op::GetUpval(u) => {
                    let v = clo.upvals[u as usize].borrow().clone();
                    self.stack.push(v);
                }
                Op::SetUpval(u) => {
                    let v = self.pop();
                    *clo.upvals[u as usize].borrow_mut() = v;
                }
                Op::GetGlobal(g) => {
                    let v = self.globals[g as usize].clone();
                    self.stack.push(v);
                }
                Op::SetGlobal(g) => {
                    let v = self.pop();
                    self.globals[g as usize] = v;
                }
                Op::Add => {
                    let r = match self.pop2() {
                        (Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_add(y)),
                        (a, b) => check!(self, clo, ip, value::add(a, b)),
                    };
                    self.stack.push(r);
                }
                Op::Sub => {
                    let r = match self.pop2() {
                        (Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_sub(y)),
                        (a, b) => check!(self, clo, ip, value::sub(a, b)),
                    };
                    self.stack.push(r);
                }
                Op::Mul => {
                    let (a, b) = self.pop2();
                    let r = check!(self, clo, ip, value::mul(a, b));
                    self.stack.push(r);
                }
                Op::Div => {
                    let (a, b) = self.pop2();
                    let r = check!(self, clo, ip, value::div(a, b));
                    self.stack.push(r);
                }
                Op::Mod => {
                    let (a, b) = self.pop2();
                    let r = check!(self, clo, ip, value::rem(a, b));
                    self.stack.push(r);
                }
                Op::Neg => {
                    let r = match self.pop() {
                        Value::Int(x) => Value::Int(x.wrapping_neg()),
                        v => check!(
                            self,
                            clo,
                            ip,
                            Err(format!("cannot negate {}", v.type_name()))
                        ),
                    };
                    self.stack.push(r);
                }
                Op::Not => {
                    let v = self.pop();
                    self.stack.push(Value::Bool(!v.truthy()));
                }
                Op::Eq | Op::Ne => {
                    let (a, b) = self.pop2();
                    let eq = value::equal(&a, &b);
                    self.stack.push(Value::Bool(eq == (op == Op::Eq)));
                }
                Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                    let (a, b) = self.pop2();
                    let ord = match (&a, &b) {
                        (Value::Int(x), Value::Int(y)) => x.cmp(y),
                        _ => check!(self, clo, ip, value::compare(&a, &b)),
                    };
                    let r = match op {
                        Op::Lt => ord.is_lt(),
                        Op::Le => ord.is_le(),
                        Op::Gt => ord.is_gt(),
                        _ => ord.is_ge(),
                    };
                    self.stack.push(Value::Bool(r));
                }
                Op::Jump(t) => ip = t as usize,
                Op::JumpIfFalse(t) => {
                    if !self.pop().truthy() {
                        ip = t as usize;
                    }
                }
                Op::JumpIfFalseOrPop(t) => {
                    if self.stack.last().is_some_and(|v| !v.truthy()) {
                        ip = t as usize;
                    } else {
                        self.stack.pop();
                    }
                }
                Op::JumpIfTrueOrPop(t) => {
                    if self.stack.last().is_some_and(Value::truthy) {
                        ip = t as usize;
                    } else {
                        self.stack.pop();
                    }
                }
                Op::Call(argc) => {
                    let callee = self.stack.len() - 1 - argc as usize;
                    match &self.stack[callee] {
                        Value::Func(c) => {
                            let c = c.clone();
                            if let Some(caller) = self.frames.last_mut() {
                                caller.ip = ip;
                            }
                            check!(self, clo, ip, self.enter(c.clone(), callee, argc as usize));
                            base = callee + 1;
                            ip = 0;
                            clo = c;
                        }
                        Value::Builtin(b) => {
                            let b = *b;
                            let args = self.stack.split_off(callee + 1);
                            self.stack.pop();
                            let r = check!(self, clo, ip, builtins::call(self, b, args));
                            self.stack.push(r);
                        }
                        other => {
                            let msg = format!("cannot call {}", other.type_name());
                            return Err(self.locate(&clo, ip, RuntimeError::new(msg)));
                        }
                    }
                }
                Op::CallBuiltin(b, argc) => {
                    let args = self.stack.split_off(self.stack.len() - argc as usize);
                    let r = check!(self, clo, ip, builtins::call(self, b, args));
                    self.stack.push(r);
                }
                Op::Return => {
                    let result = self.pop();
                    let done = self.frames.pop().expect("frame");
                    self.stack.truncate(done.base - 1);
                    if self.frames.len() <= stop {
                        return Ok(result);
                    }
                    self.stack.push(result);
                    let f = self.frames.last().expect("caller frame");
                    clo = f.clo.clone();
                    ip = f.ip;
                    base = f.base;
                }
                Op::Closure(p) => {
                    let proto = clo.proto.protos[p as usize].clone();
                    let mut upvals = Vec::with_capacity(proto.captures.len());
                    for cap in &proto.captures {
                        match *cap {
                            Capture::Local(s) => match &self.stack[base + s as usize] {
                                Value::Cell(c) => upvals.push(c.clone()),
                                _ => {
                                    let e = RuntimeError::new(
                                        "internal error: captured local is not a cell",
                                    );
                                    return Err(self.locate(&clo, ip, e));
                                }
                            },
                            Capture::Upval(u) => upvals.push(clo.upvals[u as usize].clone()),
                        }
                    }
                    self.stack
                        .push(Value::Func(Rc::new(Closure { proto, upvals })));
                }
                Op::MakeList(n) => {
                    let items = self.stack.split_off(self.stack.len() - n as usize);
                    self.stack.push(Value::list(items));
                }
                Op::MakeMap(n) => {
                    let items = self.stack.split_off(self.stack.len() - 2 * n as usize);
                    let mut map = BTreeMap::new();
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        map.insert(check!(self, clo, ip, Key::from_value(&k)), v);
                    }
                    self.stack.push(Value::map(map));
                }
                Op::Index => {
                    let (obj, idx) = self.pop2();
                    let r = check!(self, clo, ip, value::index(&obj, &idx));
                    self.stack.push(r);
                }
                Op::SetIndex => {
                    let v = self.pop();
                    let (obj, idx) = self.pop2();
                    check!(self, clo, ip, value::set_index(&obj, idx, v));
                }
                Op::ForPrep(s) => {
                    let seq = match self.pop() {
                        v @ Value::List(_) => v,
                        Value::Map(m) => {
                            Value::list(m.borrow().keys().map(Key::to_value).collect())
                        }
                        Value::Str(text) => {
                            Value::list(text.chars().map(Value::char_str).collect())
                        }
                        v => check!(
                            self,
                            clo,
                            ip,
                            Err(format!("cannot iterate over {}", v.type_name()))
                        ),
                    };
                    let slot = base + s as usize;
                    self.stack[slot] = seq;
                    self.stack[slot + 1] = Value::Int(0);
                }
                Op::ForIter(s, t) => {
                    let slot = base + s as usize;
                    let i = match self.stack[slot + 1] {
                        Value::Int(i) => i as usize,
                        _ => usize::MAX,
                    };
                    let next = match &self.stack[slot] {
                        Value::List(l) => l.borrow().get(i).cloned(),
                        _ => None,
                    };
                    match next {
                        Some(v) => {
                            self.stack[slot + 1] = Value::Int(i as i64 + 1);
                            self.stack.push(v);
                        }
                        None => ip = t as usize,
                    }
                }
            }
        }
    }
}

/// Names of the opcodes used by a program (handy when writing tests).
pub fn opcodes_used(program: &Program) -> BTreeSet<String> {
    fn walk(p: &crate::compiler::Proto, out: &mut BTreeSet<String>) {
        for op in &p.code {
            let name = format!("{op:?}");
            out.insert(name.split('(').next().unwrap_or("").to_string());
        }
        p.protos.iter().for_each(|q| walk(q, out));
    }
    let mut out = BTreeSet::new();
    walk(&program.main, &mut out);
    out
}
