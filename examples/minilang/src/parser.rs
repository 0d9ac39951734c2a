//! Recursive-descent statement parser with a Pratt (precedence climbing) expression parser.

use crate::ast::{BinOp, CompileError, Expr, ExprKind, FuncDef, Stmt, StmtKind, UnOp};
use crate::lexer::{tokenize, Tok, Token};

const PREC_OR: u8 = 1;
const PREC_AND: u8 = 2;
const PREC_EQ: u8 = 3;
const PREC_CMP: u8 = 4;
const PREC_TERM: u8 = 5;
const PREC_FACTOR: u8 = 6;
const PREC_UNARY: u8 = 7;
const PREC_POSTFIX: u8 = 8;

/// Parses a whole program into a list of statements.
pub fn parse(src: &str) -> Result<Vec<Stmt>, CompileError> {
    let mut p = Parser {
        toks: tokenize(src)?,
        pos: 0,
    };
    let mut stmts = Vec::new();
    while *p.peek() != Tok::Eof {
        stmts.push(p.statement()?);
    }
    Ok(stmts)
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
}

type PResult<T> = Result<T, CompileError>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        self.toks
            .get(self.pos + n)
            .map(|t| &t.tok)
            .unwrap_or(&Tok::Eof)
    }

    fn line(&self) -> u32 {
        self.toks[self.pos].line
    }

    fn advance(&mut self) -> Tok {
        let t = self.toks[self.pos].tok.clone();
        if t != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn error(&self, msg: impl Into<String>) -> CompileError {
        let t = &self.toks[self.pos];
        CompileError::new(msg, t.line, t.col)
    }

    fn expect(&mut self, t: &Tok) -> PResult<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.error(format!(
                "expected {} but found {}",
                t.describe(),
                self.peek().describe()
            )))
        }
    }

    fn ident(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Tok::Ident(name) => {
                self.pos += 1;
                Ok(name)
            }
            other => Err(self.error(format!("expected a name but found {}", other.describe()))),
        }
    }

    fn block(&mut self) -> PResult<Vec<Stmt>> {
        self.expect(&Tok::LBrace)?;
        let mut stmts = Vec::new();
        while *self.peek() != Tok::RBrace {
            if *self.peek() == Tok::Eof {
                return Err(self.error("unterminated block: expected '}'"));
            }
            stmts.push(self.statement()?);
        }
        self.pos += 1;
        Ok(stmts)
    }

    fn statement(&mut self) -> PResult<Stmt> {
        let line = self.line();
        let kind = match self.peek() {
            Tok::Let => {
                self.pos += 1;
                let name = self.ident()?;
                self.expect(&Tok::Assign)?;
                let value = self.expr(0)?;
                self.expect(&Tok::Semi)?;
                StmtKind::Let(name, value)
            }
            Tok::Fn if matches!(self.peek_at(1), Tok::Ident(_)) => {
                self.pos += 1;
                let name = self.ident()?;
                StmtKind::Fn(Box::new(self.func_rest(name, line)?))
            }
            Tok::If => self.if_rest()?,
            Tok::While => {
                self.pos += 1;
                let cond = self.expr(0)?;
                StmtKind::While(cond, self.block()?)
            }
            Tok::For => {
                self.pos += 1;
                let name = self.ident()?;
                self.expect(&Tok::In)?;
                let seq = self.expr(0)?;
                StmtKind::For(name, seq, self.block()?)
            }
            Tok::Return => {
                self.pos += 1;
                if self.eat(&Tok::Semi) {
                    StmtKind::Return(None)
                } else {
                    let e = self.expr(0)?;
                    self.expect(&Tok::Semi)?;
                    StmtKind::Return(Some(e))
                }
            }
            Tok::Break => {
                self.pos += 1;
                self.expect(&Tok::Semi)?;
                StmtKind::Break
            }
            Tok::Continue => {
                self.pos += 1;
                self.expect(&Tok::Semi)?;
                StmtKind::Continue
            }
            Tok::LBrace => StmtKind::Block(self.block()?),
            _ => self.expr_statement()?,
        };
        Ok(Stmt { kind, line })
    }

    fn if_rest(&mut self) -> PResult<StmtKind> {
        self.expect(&Tok::If)?;
        let cond = self.expr(0)?;
        let then = self.block()?;
        let otherwise = if self.eat(&Tok::Else) {
            if *self.peek() == Tok::If {
                let line = self.line();
                Some(vec![Stmt {
                    kind: self.if_rest()?,
                    line,
                }])
            } else {
                Some(self.block()?)
            }
        } else {
            None
        };
        Ok(StmtKind::If(cond, then, otherwise))
    }

    fn expr_statement(&mut self) -> PResult<StmtKind> {
        let target = self.expr(0)?;
        let line = target.line;
        let op = match self.peek() {
            Tok::Assign => None,
            Tok::PlusAssign => Some(BinOp::Add),
            Tok::MinusAssign => Some(BinOp::Sub),
            _ => {
                self.expect(&Tok::Semi)?;
                return Ok(StmtKind::Expr(target));
            }
        };
        if !matches!(target.kind, ExprKind::Var(_) | ExprKind::Index(..)) {
            return Err(self.error("invalid assignment target"));
        }
        self.pos += 1;
        let mut value = self.expr(0)?;
        if let Some(op) = op {
            // `a op= b` is sugar for `a = a op b` (the target is evaluated twice).
            value = Expr::new(
                ExprKind::Binary(op, Box::new(target.clone()), Box::new(value)),
                line,
            );
        }
        self.expect(&Tok::Semi)?;
        Ok(StmtKind::Assign(target, value))
    }

    fn func_rest(&mut self, name: String, line: u32) -> PResult<FuncDef> {
        self.expect(&Tok::LParen)?;
        let mut params: Vec<String> = Vec::new();
        if !self.eat(&Tok::RParen) {
            loop {
                let p = self.ident()?;
                if params.contains(&p) {
                    return Err(self.error(format!("duplicate parameter '{p}'")));
                }
                params.push(p);
                if self.eat(&Tok::RParen) {
                    break;
                }
                self.expect(&Tok::Comma)?;
            }
        }
        if params.len() > 255 {
            return Err(self.error("too many parameters"));
        }
        let body = self.block()?;
        Ok(FuncDef {
            name,
            params,
            body,
            line,
        })
    }

    /// Comma-separated expressions up to (and including) `close`; trailing comma allowed.
    fn expr_list(&mut self, close: &Tok) -> PResult<Vec<Expr>> {
        let mut items = Vec::new();
        while !self.eat(close) {
            items.push(self.expr(0)?);
            if !self.eat(&Tok::Comma) {
                self.expect(close)?;
                break;
            }
        }
        Ok(items)
    }

    fn expr(&mut self, min_prec: u8) -> PResult<Expr> {
        let mut left = self.prefix()?;
        loop {
            let prec = match self.peek() {
                Tok::Or => PREC_OR,
                Tok::And => PREC_AND,
                Tok::EqEq | Tok::NotEq => PREC_EQ,
                Tok::Lt | Tok::Le | Tok::Gt | Tok::Ge => PREC_CMP,
                Tok::Plus | Tok::Minus => PREC_TERM,
                Tok::Star | Tok::Slash | Tok::Percent => PREC_FACTOR,
                Tok::LParen | Tok::LBracket | Tok::Dot => PREC_POSTFIX,
                _ => break,
            };
            if prec < min_prec {
                break;
            }
            let line = self.line();
            let tok = self.advance();
            let kind = match tok {
                Tok::LParen => {
                    let args = self.expr_list(&Tok::RParen)?;
                    if args.len() > 255 {
                        return Err(self.error("too many arguments"));
                    }
                    ExprKind::Call(Box::new(left), args)
                }
                Tok::LBracket => {
                    let index = self.expr(0)?;
                    self.expect(&Tok::RBracket)?;
                    ExprKind::Index(Box::new(left), Box::new(index))
                }
                Tok::Dot => {
                    let field = Expr::new(ExprKind::Str(self.ident()?), line);
                    ExprKind::Index(Box::new(left), Box::new(field))
                }
                Tok::And | Tok::Or => {
                    let right = self.expr(prec + 1)?;
                    ExprKind::Logic(tok == Tok::And, Box::new(left), Box::new(right))
                }
                _ => {
                    let op = match tok {
                        Tok::EqEq => BinOp::Eq,
                        Tok::NotEq => BinOp::Ne,
                        Tok::Lt => BinOp::Lt,
                        Tok::Le => BinOp::Le,
                        Tok::Gt => BinOp::Gt,
                        Tok::Ge => BinOp::Ge,
                        Tok::Plus => BinOp::Add,
                        Tok::Minus => BinOp::Sub,
                        Tok::Star => BinOp::Mul,
                        Tok::Slash => BinOp::Div,
                        _ => BinOp::Mod,
                    };
                    let right = self.expr(prec + 1)?;
                    ExprKind::Binary(op, Box::new(left), Box::new(right))
                }
            };
            left = Expr::new(kind, line);
        }
        Ok(left)
    }

    fn prefix(&mut self) -> PResult<Expr> {
        let line = self.line();
        let kind = match self.advance() {
            Tok::Int(n) => ExprKind::Int(n),
            Tok::Str(s) => ExprKind::Str(s),
            Tok::True => ExprKind::Bool(true),
            Tok::False => ExprKind::Bool(false),
            Tok::Nil => ExprKind::Nil,
            Tok::Ident(name) => ExprKind::Var(name),
            Tok::LParen => {
                let e = self.expr(0)?;
                self.expect(&Tok::RParen)?;
                return Ok(e);
            }
            Tok::LBracket => ExprKind::List(self.expr_list(&Tok::RBracket)?),
            Tok::LBrace => {
                let mut pairs = Vec::new();
                while !self.eat(&Tok::RBrace) {
                    let key = self.expr(0)?;
                    self.expect(&Tok::Colon)?;
                    let value = self.expr(0)?;
                    pairs.push((key, value));
                    if !self.eat(&Tok::Comma) {
                        self.expect(&Tok::RBrace)?;
                        break;
                    }
                }
                ExprKind::Map(pairs)
            }
            Tok::Fn => ExprKind::Func(Box::new(self.func_rest("<anonymous>".to_string(), line)?)),
            Tok::Minus => match self.expr(PREC_UNARY)? {
                Expr {
                    kind: ExprKind::Int(n),
                    ..
                } => ExprKind::Int(n.wrapping_neg()),
                e => ExprKind::Unary(UnOp::Neg, Box::new(e)),
            },
            Tok::Not => ExprKind::Unary(UnOp::Not, Box::new(self.expr(PREC_UNARY)?)),
            other => {
                // Point at the token we just consumed.
                self.pos = self.pos.saturating_sub(usize::from(other != Tok::Eof));
                return Err(self.error(format!(
                    "expected an expression but found {}",
                    other.describe()
                )));
            }
        };
        Ok(Expr::new(kind, line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr_of(src: &str) -> ExprKind {
        match parse(src).unwrap().remove(0).kind {
            StmtKind::Expr(e) => e.kind,
            other => panic!("not an expression statement: {other:?}"),
        }
    }

    #[test]
    fn respects_precedence() {
        // 1 + 2 * 3 == 7  parses as  (1 + (2 * 3)) == 7
        match expr_of("1 + 2 * 3 == 7;") {
            ExprKind::Binary(BinOp::Eq, lhs, _) => match lhs.kind {
                ExprKind::Binary(BinOp::Add, _, rhs) => {
                    assert!(matches!(rhs.kind, ExprKind::Binary(BinOp::Mul, _, _)))
                }
                other => panic!("unexpected {other:?}"),
            },
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn parses_postfix_chains_and_sugar() {
        match expr_of("a.b[1](2);") {
            ExprKind::Call(callee, args) => {
                assert_eq!(args.len(), 1);
                assert!(matches!(callee.kind, ExprKind::Index(..)));
            }
            other => panic!("unexpected {other:?}"),
        }
        let stmts =
            parse("x += 2; fn f(a, b) { return a; } if a { } else if b { } else { }").unwrap();
        assert!(matches!(stmts[0].kind, StmtKind::Assign(..)));
        assert!(matches!(&stmts[1].kind, StmtKind::Fn(f) if f.params.len() == 2));
        assert!(matches!(stmts[2].kind, StmtKind::If(_, _, Some(_))));
    }

    #[test]
    fn reports_syntax_errors_with_position() {
        let err = parse("let x = ;").unwrap_err();
        assert_eq!((err.line, err.col), (1, 9));
        assert!(parse("1 = 2;").is_err());
        assert!(parse("fn f(a, a) {}").is_err());
        assert!(parse("while x { ").is_err());
    }
}
