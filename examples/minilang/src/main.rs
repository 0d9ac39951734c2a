//! Command-line front end for minilang.

use std::process::ExitCode;

const USAGE: &str = "usage:
  minilang run <file.mini> [args...]   run a program
  minilang bench [--scale N]           run the built-in benchmark mix N times
  minilang --version                   print the version";

/// Default `bench` scale: about half a second of work on a current x86-64 core.
const DEFAULT_SCALE: u32 = 2;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => {
            println!("minilang {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("run") if args.len() >= 2 => run(&args[1], args[2..].to_vec()),
        Some("bench") => match parse_scale(&args[1..]) {
            Ok(scale) => bench(scale),
            Err(msg) => usage_error(&msg),
        },
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => usage_error("missing or unknown command"),
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("minilang: {msg}\n{USAGE}");
    ExitCode::from(2)
}

fn parse_scale(args: &[String]) -> Result<u32, String> {
    match args {
        [] => Ok(DEFAULT_SCALE),
        [flag, n] if flag == "--scale" => match n.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("bad scale '{n}'")),
        },
        _ => Err("bench takes only --scale N".to_string()),
    }
}

fn run(path: &str, args: Vec<String>) -> ExitCode {
    let src = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("minilang: cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut vm = minilang::Vm::new();
    vm.set_echo(true);
    vm.set_args(args);
    match minilang::run_on(&mut vm, &src) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            vm.flush();
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(scale: u32) -> ExitCode {
    match minilang::bench(scale) {
        Ok(r) => {
            println!("programs: {}", minilang::PROGRAMS.len());
            println!("scale: {scale}");
            println!("runs: {}", r.runs);
            println!("output bytes: {}", r.output_bytes);
            println!("instructions: {}", r.instructions);
            println!("checksum: {:016x}", r.checksum);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("minilang bench: {e}");
            ExitCode::FAILURE
        }
    }
}
