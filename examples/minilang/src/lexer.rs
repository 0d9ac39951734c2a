//! Turns source text into a flat list of tokens.

use crate::ast::CompileError;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Int(i64),
    Str(String),
    Ident(String),
    Let,
    Fn,
    If,
    Else,
    While,
    For,
    In,
    Return,
    Break,
    Continue,
    True,
    False,
    Nil,
    And,
    Or,
    Not,
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Semi,
    Colon,
    Dot,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Assign,
    PlusAssign,
    MinusAssign,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Eof,
}

impl Tok {
    /// A short human-readable description, used in error messages.
    pub fn describe(&self) -> String {
        let sym = match self {
            Tok::Int(n) => return format!("integer {n}"),
            Tok::Str(_) => return "string literal".to_string(),
            Tok::Ident(s) => return format!("identifier '{s}'"),
            Tok::Eof => return "end of input".to_string(),
            Tok::Let => "let",
            Tok::Fn => "fn",
            Tok::If => "if",
            Tok::Else => "else",
            Tok::While => "while",
            Tok::For => "for",
            Tok::In => "in",
            Tok::Return => "return",
            Tok::Break => "break",
            Tok::Continue => "continue",
            Tok::True => "true",
            Tok::False => "false",
            Tok::Nil => "nil",
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Not => "not",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Comma => ",",
            Tok::Semi => ";",
            Tok::Colon => ":",
            Tok::Dot => ".",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::Assign => "=",
            Tok::PlusAssign => "+=",
            Tok::MinusAssign => "-=",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
        };
        format!("'{sym}'")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub line: u32,
    pub col: u32,
}

fn keyword(word: &str) -> Option<Tok> {
    Some(match word {
        "let" => Tok::Let,
        "fn" => Tok::Fn,
        "if" => Tok::If,
        "else" => Tok::Else,
        "while" => Tok::While,
        "for" => Tok::For,
        "in" => Tok::In,
        "return" => Tok::Return,
        "break" => Tok::Break,
        "continue" => Tok::Continue,
        "true" => Tok::True,
        "false" => Tok::False,
        "nil" => Tok::Nil,
        "and" => Tok::And,
        "or" => Tok::Or,
        "not" => Tok::Not,
        _ => return None,
    })
}

/// Tokenizes `src`. The result always ends with a `Tok::Eof` token.
pub fn tokenize(src: &str) -> Result<Vec<Token>, CompileError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0usize;
    let mut line = 1u32;
    let mut line_start = 0usize;
    while i < b.len() {
        let c = b[i];
        let col = (i - line_start) as u32 + 1;
        let next = b.get(i + 1).copied().unwrap_or(0);
        match c {
            b'\n' => {
                i += 1;
                line += 1;
                line_start = i;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if next == b'/' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'0'..=b'9' => {
                let start = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'_') {
                    return Err(CompileError::new("malformed number", line, col));
                }
                let text = &src[start..i];
                let n = text.parse::<i64>().map_err(|_| {
                    CompileError::new(format!("integer literal {text} is too large"), line, col)
                })?;
                out.push(Token {
                    tok: Tok::Int(n),
                    line,
                    col,
                });
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let word = &src[start..i];
                let tok = keyword(word).unwrap_or_else(|| Tok::Ident(word.to_string()));
                out.push(Token { tok, line, col });
            }
            b'"' => {
                let (start_line, start_col) = (line, col);
                i += 1;
                let mut bytes = Vec::new();
                loop {
                    let Some(&ch) = b.get(i) else {
                        return Err(CompileError::new(
                            "unterminated string",
                            start_line,
                            start_col,
                        ));
                    };
                    i += 1;
                    match ch {
                        b'"' => break,
                        b'\\' => {
                            let esc = b.get(i).copied().unwrap_or(0);
                            i += 1;
                            bytes.push(match esc {
                                b'n' => b'\n',
                                b't' => b'\t',
                                b'r' => b'\r',
                                b'0' => 0,
                                b'"' => b'"',
                                b'\\' => b'\\',
                                _ => {
                                    let msg = format!("unknown escape '\\{}'", esc as char);
                                    return Err(CompileError::new(
                                        msg,
                                        line,
                                        (i - line_start) as u32,
                                    ));
                                }
                            });
                        }
                        b'\n' => {
                            line += 1;
                            line_start = i;
                            bytes.push(ch);
                        }
                        _ => bytes.push(ch),
                    }
                }
                // Only ASCII bytes were substituted, so the bytes are still valid UTF-8.
                let s = String::from_utf8(bytes).map_err(|_| {
                    CompileError::new("invalid UTF-8 in string", start_line, start_col)
                })?;
                out.push(Token {
                    tok: Tok::Str(s),
                    line: start_line,
                    col: start_col,
                });
            }
            _ => {
                let two = match (c, next) {
                    (b'=', b'=') => Some(Tok::EqEq),
                    (b'!', b'=') => Some(Tok::NotEq),
                    (b'<', b'=') => Some(Tok::Le),
                    (b'>', b'=') => Some(Tok::Ge),
                    (b'&', b'&') => Some(Tok::And),
                    (b'|', b'|') => Some(Tok::Or),
                    (b'+', b'=') => Some(Tok::PlusAssign),
                    (b'-', b'=') => Some(Tok::MinusAssign),
                    _ => None,
                };
                if let Some(tok) = two {
                    out.push(Token { tok, line, col });
                    i += 2;
                    continue;
                }
                let tok = match c {
                    b'(' => Tok::LParen,
                    b')' => Tok::RParen,
                    b'{' => Tok::LBrace,
                    b'}' => Tok::RBrace,
                    b'[' => Tok::LBracket,
                    b']' => Tok::RBracket,
                    b',' => Tok::Comma,
                    b';' => Tok::Semi,
                    b':' => Tok::Colon,
                    b'.' => Tok::Dot,
                    b'+' => Tok::Plus,
                    b'-' => Tok::Minus,
                    b'*' => Tok::Star,
                    b'/' => Tok::Slash,
                    b'%' => Tok::Percent,
                    b'=' => Tok::Assign,
                    b'<' => Tok::Lt,
                    b'>' => Tok::Gt,
                    b'!' => Tok::Not,
                    _ => {
                        let ch = src[i..].chars().next().unwrap_or('?');
                        return Err(CompileError::new(
                            format!("unexpected character '{ch}'"),
                            line,
                            col,
                        ));
                    }
                };
                out.push(Token { tok, line, col });
                i += 1;
            }
        }
    }
    let col = (b.len() - line_start) as u32 + 1;
    out.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn lexes_operators_and_keywords() {
        assert_eq!(
            toks("let x = 10 <= y && !z; // comment"),
            vec![
                Tok::Let,
                Tok::Ident("x".into()),
                Tok::Assign,
                Tok::Int(10),
                Tok::Le,
                Tok::Ident("y".into()),
                Tok::And,
                Tok::Not,
                Tok::Ident("z".into()),
                Tok::Semi,
                Tok::Eof
            ]
        );
    }

    #[test]
    fn lexes_strings_with_escapes_and_tracks_lines() {
        let t = tokenize("\"a\\n\\\"b\"\n  x").unwrap();
        assert_eq!(t[0].tok, Tok::Str("a\n\"b".into()));
        assert_eq!((t[1].line, t[1].col), (2, 3));
    }

    #[test]
    fn reports_bad_input() {
        assert!(tokenize("\"open").is_err());
        assert!(tokenize("let a = 99999999999999999999;").is_err());
        assert!(tokenize("a @ b").is_err());
    }
}
