//! Built-in functions.

use std::cmp::Ordering;
use std::rc::Rc;

use crate::value::{compare, equal, norm_index, Key, ListRef, Value};
use crate::vm::{RuntimeError, Vm};

macro_rules! builtins {
    ($($variant:ident => $name:literal,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Builtin { $($variant,)* }

        const ALL: &[Builtin] = &[$(Builtin::$variant,)*];

        impl Builtin {
            pub fn name(self) -> &'static str {
                match self { $(Builtin::$variant => $name,)* }
            }
        }
    };
}

builtins! {
    Print => "print",
    Len => "len",
    Push => "push",
    Pop => "pop",
    Keys => "keys",
    Values => "values",
    Contains => "contains",
    Remove => "remove",
    Str => "str",
    Int => "int",
    Type => "type",
    Split => "split",
    Join => "join",
    Chars => "chars",
    Substr => "substr",
    Find => "find",
    Replace => "replace",
    Upper => "upper",
    Lower => "lower",
    Trim => "trim",
    Ord => "ord",
    Chr => "chr",
    IsDigit => "is_digit",
    IsAlpha => "is_alpha",
    IsSpace => "is_space",
    Sort => "sort",
    Reverse => "reverse",
    Range => "range",
    Slice => "slice",
    Abs => "abs",
    Min => "min",
    Max => "max",
    ReadFile => "read_file",
    Args => "args",
    Assert => "assert",
}

impl Builtin {
    pub fn lookup(name: &str) -> Option<Builtin> {
        ALL.iter().copied().find(|b| b.name() == name)
    }
}

type BResult = Result<Value, RuntimeError>;

fn fail<T>(b: Builtin, msg: impl std::fmt::Display) -> Result<T, RuntimeError> {
    Err(RuntimeError::new(format!("{}: {msg}", b.name())))
}

fn check_arity(b: Builtin, args: &[Value], min: usize, max: usize) -> Result<(), RuntimeError> {
    if args.len() < min || args.len() > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return fail(b, format!("expected {want} arguments, got {}", args.len()));
    }
    Ok(())
}

fn int_arg(b: Builtin, args: &[Value], i: usize) -> Result<i64, RuntimeError> {
    match &args[i] {
        Value::Int(n) => Ok(*n),
        v => fail(
            b,
            format!("argument {} must be an int, not {}", i + 1, v.type_name()),
        ),
    }
}

fn str_arg(b: Builtin, args: &[Value], i: usize) -> Result<Rc<str>, RuntimeError> {
    match &args[i] {
        Value::Str(s) => Ok(s.clone()),
        v => fail(
            b,
            format!("argument {} must be a string, not {}", i + 1, v.type_name()),
        ),
    }
}

fn list_arg(b: Builtin, args: &[Value], i: usize) -> Result<ListRef, RuntimeError> {
    match &args[i] {
        Value::List(l) => Ok(l.clone()),
        v => fail(
            b,
            format!("argument {} must be a list, not {}", i + 1, v.type_name()),
        ),
    }
}

fn strs(items: Vec<&str>) -> Value {
    Value::list(items.into_iter().map(Value::str).collect())
}

/// Tests the first character of a string argument against a predicate.
fn char_class(b: Builtin, args: &[Value], pred: fn(char) -> bool) -> BResult {
    check_arity(b, args, 1, 1)?;
    let s = str_arg(b, args, 0)?;
    Ok(Value::Bool(s.chars().next().is_some_and(pred)))
}

/// Clamps a byte range to `s` and checks it falls on character boundaries.
fn str_range(b: Builtin, s: &str, start: i64, end: i64) -> Result<(usize, usize), RuntimeError> {
    let len = s.len() as i64;
    let fix = |i: i64| if i < 0 { (i + len).max(0) } else { i.min(len) } as usize;
    let (start, end) = (fix(start), fix(end));
    let end = end.max(start);
    if !s.is_char_boundary(start) || !s.is_char_boundary(end) {
        return fail(b, "range is not on character boundaries");
    }
    Ok((start, end))
}

pub fn call(vm: &mut Vm, b: Builtin, args: Vec<Value>) -> BResult {
    use Builtin as B;
    match b {
        B::Print => {
            let mut line = String::new();
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    line.push(' ');
                }
                crate::value::write_value(&mut line, a, false, 0);
            }
            line.push('\n');
            vm.write_out(&line);
            Ok(Value::Nil)
        }
        B::Len => {
            check_arity(b, &args, 1, 1)?;
            let n = match &args[0] {
                Value::Str(s) => s.len(),
                Value::List(l) => l.borrow().len(),
                Value::Map(m) => m.borrow().len(),
                v => return fail(b, format!("{} has no length", v.type_name())),
            };
            Ok(Value::Int(n as i64))
        }
        B::Push => {
            check_arity(b, &args, 2, 2)?;
            list_arg(b, &args, 0)?.borrow_mut().push(args[1].clone());
            Ok(Value::Nil)
        }
        B::Pop => {
            check_arity(b, &args, 1, 1)?;
            match list_arg(b, &args, 0)?.borrow_mut().pop() {
                Some(v) => Ok(v),
                None => fail(b, "pop from an empty list"),
            }
        }
        B::Keys | B::Values => {
            check_arity(b, &args, 1, 1)?;
            let Value::Map(m) = &args[0] else {
                return fail(b, format!("expected a map, not {}", args[0].type_name()));
            };
            let m = m.borrow();
            Ok(Value::list(if b == B::Keys {
                m.keys().map(Key::to_value).collect()
            } else {
                m.values().cloned().collect()
            }))
        }
        B::Contains => {
            check_arity(b, &args, 2, 2)?;
            let found = match (&args[0], &args[1]) {
                (Value::Str(s), Value::Str(sub)) => s.contains(&**sub),
                (Value::List(l), x) => l.borrow().iter().any(|v| equal(v, x)),
                (Value::Map(m), k) => Key::from_value(k).is_ok_and(|k| m.borrow().contains_key(&k)),
                (v, _) => return fail(b, format!("cannot search in {}", v.type_name())),
            };
            Ok(Value::Bool(found))
        }
        B::Remove => {
            check_arity(b, &args, 2, 2)?;
            match &args[0] {
                Value::Map(m) => {
                    let k = Key::from_value(&args[1]).or_else(|e| fail(b, e))?;
                    Ok(m.borrow_mut().remove(&k).unwrap_or(Value::Nil))
                }
                Value::List(l) => {
                    let mut l = l.borrow_mut();
                    let i = norm_index(int_arg(b, &args, 1)?, l.len()).or_else(|e| fail(b, e))?;
                    Ok(l.remove(i))
                }
                v => fail(b, format!("cannot remove from {}", v.type_name())),
            }
        }
        B::Str => {
            check_arity(b, &args, 1, 1)?;
            match &args[0] {
                Value::Str(_) => Ok(args[0].clone()),
                v => Ok(Value::str(&v.display())),
            }
        }
        B::Int => {
            check_arity(b, &args, 1, 1)?;
            match &args[0] {
                Value::Int(n) => Ok(Value::Int(*n)),
                Value::Bool(x) => Ok(Value::Int(i64::from(*x))),
                Value::Str(s) => match s.trim().parse::<i64>() {
                    Ok(n) => Ok(Value::Int(n)),
                    Err(_) => fail(b, format!("cannot convert \"{s}\" to an int")),
                },
                v => fail(b, format!("cannot convert {} to an int", v.type_name())),
            }
        }
        B::Type => {
            check_arity(b, &args, 1, 1)?;
            Ok(Value::str(args[0].type_name()))
        }
        B::Split => {
            check_arity(b, &args, 1, 2)?;
            let s = str_arg(b, &args, 0)?;
            if args.len() == 1 {
                return Ok(strs(s.split_whitespace().collect()));
            }
            let sep = str_arg(b, &args, 1)?;
            if sep.is_empty() {
                return fail(b, "empty separator");
            }
            Ok(strs(s.split(&*sep).collect()))
        }
        B::Join => {
            check_arity(b, &args, 1, 2)?;
            let l = list_arg(b, &args, 0)?;
            let sep = if args.len() == 2 {
                str_arg(b, &args, 1)?
            } else {
                Rc::from("")
            };
            let mut out = String::new();
            for (i, v) in l.borrow().iter().enumerate() {
                if i > 0 {
                    out.push_str(&sep);
                }
                crate::value::write_value(&mut out, v, false, 0);
            }
            Ok(Value::str(&out))
        }
        B::Chars => {
            check_arity(b, &args, 1, 1)?;
            let s = str_arg(b, &args, 0)?;
            Ok(Value::list(s.chars().map(Value::char_str).collect()))
        }
        B::Substr => {
            check_arity(b, &args, 2, 3)?;
            let s = str_arg(b, &args, 0)?;
            let start = int_arg(b, &args, 1)?;
            let count = if args.len() == 3 {
                int_arg(b, &args, 2)?.max(0)
            } else {
                s.len() as i64
            };
            let (from, _) = str_range(b, &s, start, start)?;
            let (from, to) = str_range(b, &s, from as i64, (from as i64).saturating_add(count))?;
            Ok(Value::str(&s[from..to]))
        }
        B::Find => {
            check_arity(b, &args, 2, 3)?;
            let s = str_arg(b, &args, 0)?;
            let sub = str_arg(b, &args, 1)?;
            let start = if args.len() == 3 {
                int_arg(b, &args, 2)?
            } else {
                0
            };
            let (from, _) = str_range(b, &s, start, start)?;
            Ok(Value::Int(
                s[from..].find(&*sub).map_or(-1, |i| (i + from) as i64),
            ))
        }
        B::Replace => {
            check_arity(b, &args, 3, 3)?;
            let s = str_arg(b, &args, 0)?;
            let from = str_arg(b, &args, 1)?;
            if from.is_empty() {
                return fail(b, "empty pattern");
            }
            Ok(Value::str(&s.replace(&*from, &str_arg(b, &args, 2)?)))
        }
        B::Upper | B::Lower | B::Trim => {
            check_arity(b, &args, 1, 1)?;
            let s = str_arg(b, &args, 0)?;
            Ok(match b {
                B::Upper => Value::str(&s.to_uppercase()),
                B::Lower if s.bytes().all(|c| !c.is_ascii_uppercase()) => args[0].clone(),
                B::Lower => Value::str(&s.to_lowercase()),
                _ => Value::str(s.trim()),
            })
        }
        B::Ord => {
            check_arity(b, &args, 1, 1)?;
            match str_arg(b, &args, 0)?.chars().next() {
                Some(c) => Ok(Value::Int(c as i64)),
                None => fail(b, "empty string"),
            }
        }
        B::Chr => {
            check_arity(b, &args, 1, 1)?;
            let n = int_arg(b, &args, 0)?;
            match u32::try_from(n).ok().and_then(char::from_u32) {
                Some(c) => Ok(Value::char_str(c)),
                None => fail(b, format!("{n} is not a character code")),
            }
        }
        B::IsDigit => char_class(b, &args, |c| c.is_ascii_digit()),
        B::IsAlpha => char_class(b, &args, char::is_alphabetic),
        B::IsSpace => char_class(b, &args, char::is_whitespace),
        B::Sort => {
            check_arity(b, &args, 1, 2)?;
            let items = list_arg(b, &args, 0)?.borrow().clone();
            Ok(Value::list(merge_sort(vm, items, args.get(1))?))
        }
        B::Reverse => {
            check_arity(b, &args, 1, 1)?;
            match &args[0] {
                Value::List(l) => Ok(Value::list(l.borrow().iter().rev().cloned().collect())),
                Value::Str(s) => Ok(Value::str(&s.chars().rev().collect::<String>())),
                v => fail(b, format!("cannot reverse {}", v.type_name())),
            }
        }
        B::Range => {
            check_arity(b, &args, 1, 3)?;
            let (mut lo, hi) = if args.len() == 1 {
                (0, int_arg(b, &args, 0)?)
            } else {
                (int_arg(b, &args, 0)?, int_arg(b, &args, 1)?)
            };
            let step = if args.len() == 3 {
                int_arg(b, &args, 2)?
            } else {
                1
            };
            if step == 0 {
                return fail(b, "step must not be zero");
            }
            let mut out = Vec::new();
            while (step > 0 && lo < hi) || (step < 0 && lo > hi) {
                if out.len() >= 1 << 26 {
                    return fail(b, "range too large");
                }
                out.push(Value::Int(lo));
                lo = lo.saturating_add(step);
            }
            Ok(Value::list(out))
        }
        B::Slice => {
            check_arity(b, &args, 2, 3)?;
            let l = list_arg(b, &args, 0)?;
            let l = l.borrow();
            let len = l.len() as i64;
            let fix = |i: i64| if i < 0 { (i + len).max(0) } else { i.min(len) } as usize;
            let from = fix(int_arg(b, &args, 1)?);
            let to = if args.len() == 3 {
                fix(int_arg(b, &args, 2)?)
            } else {
                l.len()
            };
            Ok(Value::list(l[from..to.max(from)].to_vec()))
        }
        B::Abs => {
            check_arity(b, &args, 1, 1)?;
            Ok(Value::Int(int_arg(b, &args, 0)?.wrapping_abs()))
        }
        B::Min | B::Max => {
            if args.is_empty() {
                return fail(b, "expected at least one argument");
            }
            let items = match &args[..] {
                [Value::List(l)] => l.borrow().clone(),
                _ => args,
            };
            let mut best: Option<Value> = None;
            for v in items {
                best = Some(match best {
                    None => v,
                    Some(cur) => {
                        let o = compare(&v, &cur).or_else(|e| fail(b, e))?;
                        let better = if b == B::Min {
                            o == Ordering::Less
                        } else {
                            o == Ordering::Greater
                        };
                        if better {
                            v
                        } else {
                            cur
                        }
                    }
                });
            }
            Ok(best.unwrap_or(Value::Nil))
        }
        B::ReadFile => {
            check_arity(b, &args, 1, 1)?;
            let path = str_arg(b, &args, 0)?;
            match vm.read_file(&path) {
                Ok(text) => Ok(Value::str(&text)),
                Err(e) => fail(b, format!("cannot read {path}: {e}")),
            }
        }
        B::Args => {
            check_arity(b, &args, 0, 0)?;
            Ok(strs(vm.args().iter().map(String::as_str).collect()))
        }
        B::Assert => {
            check_arity(b, &args, 1, 2)?;
            if args[0].truthy() {
                Ok(Value::Nil)
            } else {
                let msg = args
                    .get(1)
                    .map_or_else(|| "assertion failed".to_string(), Value::display);
                Err(RuntimeError::new(msg))
            }
        }
    }
}

/// Stable bottom-up merge sort. `cmp(a, b)` (if given) returns true when `a` goes first.
/// Unlike `slice::sort_by` it tolerates inconsistent user comparators and errors.
fn merge_sort(
    vm: &mut Vm,
    items: Vec<Value>,
    cmp: Option<&Value>,
) -> Result<Vec<Value>, RuntimeError> {
    let n = items.len();
    let mut src = items;
    let mut width = 1;
    while width < n {
        let mut dst = Vec::with_capacity(n);
        let mut lo = 0;
        while lo < n {
            let mid = (lo + width).min(n);
            let hi = (lo + 2 * width).min(n);
            let (mut i, mut j) = (lo, mid);
            while i < mid && j < hi {
                let right_first = match cmp {
                    None => {
                        compare(&src[j], &src[i]).or_else(|e| fail(Builtin::Sort, e))?
                            == Ordering::Less
                    }
                    Some(f) => vm
                        .call_value(f, vec![src[j].clone(), src[i].clone()])?
                        .truthy(),
                };
                if right_first {
                    dst.push(src[j].clone());
                    j += 1;
                } else {
                    dst.push(src[i].clone());
                    i += 1;
                }
            }
            dst.extend_from_slice(&src[i..mid]);
            dst.extend_from_slice(&src[j..hi]);
            lo = hi;
        }
        src = dst;
        width *= 2;
    }
    Ok(src)
}
