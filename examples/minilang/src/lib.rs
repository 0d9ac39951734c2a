//! minilang: a tiny dynamically typed scripting language.
//!
//! Source text goes through [`lexer`] → [`parser`] (AST in [`ast`]) → [`compiler`]
//! (bytecode) → [`vm`] (a stack machine). Everything is deterministic: maps are
//! `BTreeMap`s and there is no clock or randomness, so output and instruction counts are
//! identical from run to run.

pub mod ast;
pub mod builtins;
pub mod compiler;
pub mod lexer;
pub mod parser;
pub mod value;
pub mod vm;

use std::fmt;

pub use ast::CompileError;
pub use compiler::Program;
pub use value::Value;
pub use vm::{RuntimeError, Vm};

/// Either kind of failure a program can hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Compile(CompileError),
    Runtime(RuntimeError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Compile(e) => e.fmt(f),
            Error::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

/// Parses and compiles a program.
pub fn compile(src: &str) -> Result<Program, CompileError> {
    compiler::compile(&parser::parse(src)?)
}

/// Compiles and runs `src` on `vm`.
pub fn run_on(vm: &mut Vm, src: &str) -> Result<Value, Error> {
    let program = compile(src).map_err(Error::Compile)?;
    vm.run(&program).map_err(Error::Runtime)
}

/// Runs `src` on a fresh VM and returns everything it printed.
pub fn run_to_string(src: &str) -> Result<String, Error> {
    let mut vm = Vm::new();
    run_on(&mut vm, src)?;
    Ok(vm.take_output())
}

/// The text file `wordcount.mini` reads, as the benchmark serves it.
pub const TEXT_PATH: &str = "data/text.txt";
pub const TEXT: &str = include_str!("../data/text.txt");

/// The programs of the built-in benchmark mix.
pub const PROGRAMS: &[(&str, &str)] = &[
    ("fib", include_str!("../programs/fib.mini")),
    ("sieve", include_str!("../programs/sieve.mini")),
    ("wordcount", include_str!("../programs/wordcount.mini")),
    ("json", include_str!("../programs/json.mini")),
    ("sort", include_str!("../programs/sort.mini")),
    ("strings", include_str!("../programs/strings.mini")),
    ("closures", include_str!("../programs/closures.mini")),
];

/// 64-bit FNV-1a, continued from `hash` (start with [`FNV_OFFSET`]).
pub fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchReport {
    pub runs: u64,
    pub output_bytes: u64,
    pub instructions: u64,
    pub checksum: u64,
}

/// Runs every program in [`PROGRAMS`] `scale` times, hashing all output.
pub fn bench(scale: u32) -> Result<BenchReport, Error> {
    let compiled: Vec<Program> = PROGRAMS
        .iter()
        .map(|(_, src)| compile(src).map_err(Error::Compile))
        .collect::<Result<_, _>>()?;
    let mut vm = Vm::new();
    vm.add_file(TEXT_PATH, TEXT);
    let mut report = BenchReport {
        runs: 0,
        output_bytes: 0,
        instructions: 0,
        checksum: FNV_OFFSET,
    };
    for _ in 0..scale {
        for program in &compiled {
            vm.run(program).map_err(Error::Runtime)?;
            let out = vm.take_output();
            report.checksum = fnv1a(report.checksum, out.as_bytes());
            report.output_bytes += out.len() as u64;
            report.runs += 1;
        }
    }
    report.instructions = vm.instructions();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str) -> String {
        run_to_string(src).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn arithmetic_and_strings() {
        assert_eq!(
            run("print(1 + 2 * 3, 7 / 2, -7 % 3, 10 - -4);"),
            "7 3 -1 14\n"
        );
        assert_eq!(
            run("print(9223372036854775807 + 1);"),
            "-9223372036854775808\n"
        );
        assert_eq!(
            run("print(\"a\" + 1 + true, \"ab\" * 3, str([1, \"x\", nil]));"),
            "a1true ababab [1, \"x\", nil]\n"
        );
        assert_eq!(
            run("print(1 < 2 and \"x\" or \"y\", nil or 5, not 0);"),
            "x 5 false\n"
        );
    }

    #[test]
    fn control_flow_and_collections() {
        let src = "let t = 0; for i in range(10) { if i % 2 == 0 { continue; } if i > 7 { break; } t += i; }
                   let m = {\"b\": 2, \"a\": 1}; m.c = 3; let ks = keys(m);
                   let i = 0; while i < 3 { i += 1; }
                   print(t, ks, m[\"zz\"], len(m), i);";
        assert_eq!(run(src), "16 [\"a\", \"b\", \"c\"] nil 3 3\n");
    }

    #[test]
    fn closures_capture_by_reference() {
        let src = "fn counter() { let n = 0; return fn() { n += 1; return n; }; }
                   let c = counter(); c(); c(); let d = counter();
                   let fs = []; for i in range(3) { push(fs, fn() { return i * 10; }); }
                   fn outer() { let x = 1; fn mid() { return fn() { x += 1; return x; }; } let f = mid(); f(); return f(); }
                   print(c(), d(), fs[0](), fs[2](), outer());";
        assert_eq!(run(src), "3 1 0 20 3\n");
    }

    #[test]
    fn recursion_and_sort_with_comparator() {
        let src = "fn fact(n) { if n <= 1 { return 1; } return n * fact(n - 1); }
                   print(fact(20), sort([3, 1, 2]), sort([\"b\", \"a\"], fn(x, y) { return x > y; }));";
        assert_eq!(run(src), "2432902008176640000 [1, 2, 3] [\"b\", \"a\"]\n");
    }

    #[test]
    fn runtime_errors_carry_lines() {
        let err = run_to_string("let a = 1;\nlet b = a / 0;").unwrap_err();
        assert_eq!(
            err.to_string(),
            "runtime error: division by zero (line 2, in <script>)"
        );
        let err = run_to_string("fn f() { return f(); }\nf();").unwrap_err();
        assert!(err.to_string().contains("stack overflow"));
        assert!(matches!(
            run_to_string("let x = [1][5];"),
            Err(Error::Runtime(_))
        ));
        assert!(matches!(run_to_string("let x = ;"), Err(Error::Compile(_))));
    }
}
