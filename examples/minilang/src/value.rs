//! Runtime values and the operations on them that do not need the VM.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;

use crate::builtins::Builtin;
use crate::compiler::Proto;

pub type ListRef = Rc<RefCell<Vec<Value>>>;
pub type MapRef = Rc<RefCell<BTreeMap<Key, Value>>>;

#[derive(Clone, Debug)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Str(Rc<str>),
    List(ListRef),
    Map(MapRef),
    Func(Rc<Closure>),
    Builtin(Builtin),
    /// A boxed local captured by a closure. Only ever lives in a stack slot.
    Cell(Rc<RefCell<Value>>),
}

/// Map keys. A `BTreeMap` keeps iteration order (and so all output) deterministic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Bool(bool),
    Int(i64),
    Str(Rc<str>),
}

impl Key {
    pub fn from_value(v: &Value) -> Result<Key, String> {
        match v {
            Value::Bool(b) => Ok(Key::Bool(*b)),
            Value::Int(n) => Ok(Key::Int(*n)),
            Value::Str(s) => Ok(Key::Str(s.clone())),
            other => Err(format!("{} cannot be used as a map key", other.type_name())),
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Key::Bool(b) => Value::Bool(*b),
            Key::Int(n) => Value::Int(*n),
            Key::Str(s) => Value::Str(s.clone()),
        }
    }
}

#[derive(Debug)]
pub struct Closure {
    pub proto: Rc<Proto>,
    pub upvals: Vec<Rc<RefCell<Value>>>,
}

thread_local! {
    static ASCII: Vec<Rc<str>> = (0u8..128).map(|b| Rc::from((b as char).to_string().as_str())).collect();
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(Rc::from(s))
    }

    /// A one-character string; ASCII characters are shared rather than allocated.
    pub fn char_str(c: char) -> Value {
        if c.is_ascii() {
            ASCII.with(|t| Value::Str(t[c as usize].clone()))
        } else {
            Value::str(c.encode_utf8(&mut [0u8; 4]))
        }
    }

    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Rc::new(RefCell::new(items)))
    }

    pub fn map(m: BTreeMap<Key, Value>) -> Value {
        Value::Map(Rc::new(RefCell::new(m)))
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Func(_) | Value::Builtin(_) => "function",
            Value::Cell(_) => "cell",
        }
    }

    pub fn truthy(&self) -> bool {
        !matches!(self, Value::Nil | Value::Bool(false))
    }

    /// The text `print` and `str` produce.
    pub fn display(&self) -> String {
        let mut s = String::new();
        write_value(&mut s, self, false, 0);
        s
    }
}

/// Appends the textual form of `v`. Strings nested in containers are quoted.
pub fn write_value(out: &mut String, v: &Value, quoted: bool, depth: usize) {
    if depth > 32 {
        out.push_str("...");
        return;
    }
    match v {
        Value::Nil => out.push_str("nil"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Str(s) if quoted => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    _ => out.push(c),
                }
            }
            out.push('"');
        }
        Value::Str(s) => out.push_str(s),
        Value::List(l) => {
            out.push('[');
            for (i, item) in l.borrow().iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item, true, depth + 1);
            }
            out.push(']');
        }
        Value::Map(m) => {
            out.push('{');
            for (i, (k, item)) in m.borrow().iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, &k.to_value(), true, depth + 1);
                out.push_str(": ");
                write_value(out, item, true, depth + 1);
            }
            out.push('}');
        }
        Value::Func(c) => {
            let _ = write!(out, "<fn {}>", c.proto.name);
        }
        Value::Builtin(b) => {
            let _ = write!(out, "<builtin {}>", b.name());
        }
        Value::Cell(c) => write_value(out, &c.borrow(), quoted, depth + 1),
    }
}

/// Structural equality for data, identity for functions.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            Rc::ptr_eq(x, y) || {
                let (x, y) = (x.borrow(), y.borrow());
                x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| equal(p, q))
            }
        }
        (Value::Map(x), Value::Map(y)) => {
            Rc::ptr_eq(x, y) || {
                let (x, y) = (x.borrow(), y.borrow());
                x.len() == y.len()
                    && x.iter()
                        .zip(y.iter())
                        .all(|(p, q)| p.0 == q.0 && equal(p.1, q.1))
            }
        }
        (Value::Func(x), Value::Func(y)) => Rc::ptr_eq(x, y),
        (Value::Builtin(x), Value::Builtin(y)) => x == y,
        _ => false,
    }
}

/// Ordering for `<`, `<=`, `>`, `>=` and `sort`: ints, strings, bools and lists of those.
pub fn compare(a: &Value, b: &Value) -> Result<Ordering, String> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        (Value::List(x), Value::List(y)) => {
            let (x, y) = (x.borrow(), y.borrow());
            for (p, q) in x.iter().zip(y.iter()) {
                let o = compare(p, q)?;
                if o != Ordering::Equal {
                    return Ok(o);
                }
            }
            Ok(x.len().cmp(&y.len()))
        }
        _ => Err(format!(
            "cannot compare {} with {}",
            a.type_name(),
            b.type_name()
        )),
    }
}

pub fn add(a: Value, b: Value) -> Result<Value, String> {
    match (&a, &b) {
        (Value::Int(x), Value::Int(y)) => Ok(Value::Int(x.wrapping_add(*y))),
        (Value::Str(x), Value::Str(y)) => {
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(x);
            s.push_str(y);
            Ok(Value::Str(s.into()))
        }
        (Value::Str(x), _) => {
            let mut s = x.to_string();
            write_value(&mut s, &b, false, 0);
            Ok(Value::Str(s.into()))
        }
        (_, Value::Str(y)) => {
            let mut s = a.display();
            s.push_str(y);
            Ok(Value::Str(s.into()))
        }
        (Value::List(x), Value::List(y)) => {
            let mut items = x.borrow().clone();
            items.extend(y.borrow().iter().cloned());
            Ok(Value::list(items))
        }
        _ => Err(format!(
            "cannot add {} and {}",
            a.type_name(),
            b.type_name()
        )),
    }
}

fn ints(op: &str, a: &Value, b: &Value) -> Result<(i64, i64), String> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok((*x, *y)),
        _ => Err(format!(
            "cannot {op} {} and {}",
            a.type_name(),
            b.type_name()
        )),
    }
}

pub fn sub(a: Value, b: Value) -> Result<Value, String> {
    let (x, y) = ints("subtract", &a, &b)?;
    Ok(Value::Int(x.wrapping_sub(y)))
}

pub fn mul(a: Value, b: Value) -> Result<Value, String> {
    match (&a, &b) {
        (Value::Str(s), Value::Int(n)) | (Value::Int(n), Value::Str(s)) => {
            if *n < 0 || (*n as u64).saturating_mul(s.len() as u64) > 1 << 28 {
                return Err(format!("bad string repeat count {n}"));
            }
            Ok(Value::str(&s.repeat(*n as usize)))
        }
        (Value::List(l), Value::Int(n)) => {
            if *n < 0 || (*n as u64).saturating_mul(l.borrow().len() as u64) > 1 << 26 {
                return Err(format!("bad list repeat count {n}"));
            }
            let items = l.borrow();
            let mut out = Vec::with_capacity(items.len() * *n as usize);
            for _ in 0..*n {
                out.extend(items.iter().cloned());
            }
            Ok(Value::list(out))
        }
        _ => {
            let (x, y) = ints("multiply", &a, &b)?;
            Ok(Value::Int(x.wrapping_mul(y)))
        }
    }
}

pub fn div(a: Value, b: Value) -> Result<Value, String> {
    let (x, y) = ints("divide", &a, &b)?;
    if y == 0 {
        return Err("division by zero".to_string());
    }
    Ok(Value::Int(x.wrapping_div(y)))
}

pub fn rem(a: Value, b: Value) -> Result<Value, String> {
    let (x, y) = ints("take the remainder of", &a, &b)?;
    if y == 0 {
        return Err("modulo by zero".to_string());
    }
    Ok(Value::Int(x.wrapping_rem(y)))
}

/// Resolves a possibly negative index against `len`.
pub fn norm_index(i: i64, len: usize) -> Result<usize, String> {
    let j = if i < 0 { i.wrapping_add(len as i64) } else { i };
    if j < 0 || j >= len as i64 {
        Err(format!("index {i} out of range for length {len}"))
    } else {
        Ok(j as usize)
    }
}

pub fn index(obj: &Value, idx: &Value) -> Result<Value, String> {
    match (obj, idx) {
        (Value::List(l), Value::Int(i)) => {
            let l = l.borrow();
            Ok(l[norm_index(*i, l.len())?].clone())
        }
        (Value::Map(m), k) => {
            let key = Key::from_value(k)?;
            Ok(m.borrow().get(&key).cloned().unwrap_or(Value::Nil))
        }
        (Value::Str(s), Value::Int(i)) => {
            let j = norm_index(*i, s.len())?;
            match s.get(j..).and_then(|rest| rest.chars().next()) {
                Some(c) => Ok(Value::char_str(c)),
                None => Err(format!("string index {i} is not on a character boundary")),
            }
        }
        _ => Err(format!(
            "cannot index {} with {}",
            obj.type_name(),
            idx.type_name()
        )),
    }
}

pub fn set_index(obj: &Value, idx: Value, val: Value) -> Result<(), String> {
    match (obj, &idx) {
        (Value::List(l), Value::Int(i)) => {
            let mut l = l.borrow_mut();
            let j = norm_index(*i, l.len())?;
            l[j] = val;
            Ok(())
        }
        (Value::Map(m), k) => {
            let key = Key::from_value(k)?;
            m.borrow_mut().insert(key, val);
            Ok(())
        }
        (Value::Str(_), _) => Err("strings are immutable".to_string()),
        _ => Err(format!(
            "cannot assign into {} with {} index",
            obj.type_name(),
            idx.type_name()
        )),
    }
}
