//! Runs every bundled program through the library API and checks known output.

use std::collections::BTreeSet;
use std::process::Command;

use minilang::{compile, run_on, Vm, PROGRAMS, TEXT, TEXT_PATH};

fn run_program(name: &str) -> String {
    let (_, src) = PROGRAMS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("program exists");
    let mut vm = Vm::new();
    vm.add_file(TEXT_PATH, TEXT);
    run_on(&mut vm, src).unwrap_or_else(|e| panic!("{name}: {e}"));
    vm.take_output()
}

fn assert_line(name: &str, expected: &str) {
    let out = run_program(name);
    assert!(
        out.lines().any(|l| l == expected),
        "{name}: no line {expected:?} in output:\n{out}"
    );
}

#[test]
fn fib() {
    assert_line("fib", "fib(27) = 196418");
    assert_line("fib", "fib_iter(90) = 2880067194370816120");
}

#[test]
fn sieve() {
    assert_line("sieve", "primes up to 60000 = 6057");
    assert_line("sieve", "last three: [59971, 59981, 59999]");
}

#[test]
fn wordcount() {
    assert_line("wordcount", "total words: 16130");
    assert_line("wordcount", "  the         1867");
}

#[test]
fn json() {
    assert_line("json", "version: 3 source: minilang nums: [1, -2, 30]");
    assert!(run_program("json").contains("round trip ok"));
}

#[test]
fn sort() {
    assert_line("sort", "min: 16 max: 99992 median: 49970");
}

#[test]
fn strings() {
    assert_line(
        "strings",
        "palindromic numbers below 100000: 1098 largest: 99999",
    );
    assert_line("strings", "rot13: nycun orgn #0; Tnzzn 42 #1; qrygn-rcfvyb");
}

#[test]
fn closures() {
    assert_line(
        "closures",
        "adders: [100, 101, 104, 109, 116, 125, 136, 149]",
    );
    assert_line("closures", "counter: 16");
}

#[test]
fn data_file_matches_embedded_copy() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(TEXT_PATH);
    assert_eq!(std::fs::read_to_string(path).unwrap(), TEXT);
}

#[test]
fn programs_exercise_most_opcodes() {
    let mut used = BTreeSet::new();
    for (_, src) in PROGRAMS {
        used.extend(minilang::vm::opcodes_used(&compile(src).unwrap()));
    }
    // Every opcode but none: the mix should cover the whole interpreter loop.
    assert!(
        used.len() >= 42,
        "only {} opcodes used: {used:?}",
        used.len()
    );
}

#[test]
fn bench_is_deterministic() {
    let a = minilang::bench(1).unwrap();
    let b = minilang::bench(1).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.runs, PROGRAMS.len() as u64);
}

#[test]
fn cli_reports_runtime_errors() {
    let path = std::env::temp_dir().join(format!("minilang-err-{}.mini", std::process::id()));
    std::fs::write(
        &path,
        "print(\"before\");\nlet xs = [1, 2];\nprint(xs[2]);\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_minilang"))
        .arg("run")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("index 2 out of range for length 2 (line 3"),
        "{err}"
    );
}

#[test]
fn cli_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_minilang"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("minilang {}\n", env!("CARGO_PKG_VERSION"))
    );
}
