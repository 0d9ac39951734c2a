//! Hand-rolled argument parsing, to keep the dependency graph small.

use crate::model::Config;

pub const USAGE: &str = "\
tinyllm: a tiny deterministic transformer inference benchmark

USAGE:
    tinyllm generate [OPTIONS]   greedy-decode tokens, print them and a checksum
    tinyllm bench [OPTIONS]      time generation, print generated tokens/s
    tinyllm --help | --version

OPTIONS (generate default / bench default):
    --seed S         weight and prompt seed          (0 / 0)
    --tokens N       tokens to generate              (16 / 256)
    --layers L       transformer blocks              (2 / 4)
    --dim D          model width                     (64 / 256)
    --heads H        attention heads; D/H even       (4 / 8)
    --vocab V        vocabulary size                 (256 / 512)
    --prompt-len P   prompt tokens derived from seed (4 / 4)
    --iters K        bench only: repetitions         (- / 8)

prompt-len + tokens must not exceed 1024.
";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub seed: u64,
    pub tokens: usize,
    pub prompt_len: usize,
    pub iters: usize,
    pub config: Config,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Version,
    Generate(Run),
    Bench(Run),
}

struct Options {
    seed: u64,
    tokens: usize,
    layers: usize,
    dim: usize,
    heads: usize,
    vocab: usize,
    prompt_len: usize,
    iters: usize,
}

const GENERATE_DEFAULTS: Options = Options {
    seed: 0,
    tokens: 16,
    layers: 2,
    dim: 64,
    heads: 4,
    vocab: 256,
    prompt_len: 4,
    iters: 1,
};

const BENCH_DEFAULTS: Options = Options {
    seed: 0,
    tokens: 256,
    layers: 4,
    dim: 256,
    heads: 8,
    vocab: 512,
    prompt_len: 4,
    iters: 8,
};

/// Parses the arguments after the program name. Every error is a usage error.
pub fn parse_args(args: &[String]) -> Result<Command, String> {
    let (command, rest) = args.split_first().ok_or("missing command")?;
    let (mut o, bench) = match command.as_str() {
        "-h" | "--help" | "help" => return Ok(Command::Help),
        "-V" | "--version" => return Ok(Command::Version),
        "generate" => (GENERATE_DEFAULTS, false),
        "bench" => (BENCH_DEFAULTS, true),
        other => return Err(format!("unknown command '{other}'")),
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        if matches!(flag.as_str(), "-h" | "--help") {
            return Ok(Command::Help);
        }
        let value = it.next();
        if flag == "--seed" {
            o.seed = parse_value(flag, value)?;
            continue;
        }
        let field = match flag.as_str() {
            "--tokens" => &mut o.tokens,
            "--layers" => &mut o.layers,
            "--dim" => &mut o.dim,
            "--heads" => &mut o.heads,
            "--vocab" => &mut o.vocab,
            "--prompt-len" => &mut o.prompt_len,
            "--iters" if bench => &mut o.iters,
            _ => return Err(format!("unknown argument '{flag}'")),
        };
        *field = parse_value(flag, value)?;
    }
    for (name, value) in [
        ("--tokens", o.tokens),
        ("--prompt-len", o.prompt_len),
        ("--iters", o.iters),
    ] {
        if value == 0 {
            return Err(format!("{name} must be at least 1"));
        }
    }
    let seq_len = o
        .prompt_len
        .checked_add(o.tokens)
        .ok_or("--tokens is too large")?;
    let run = Run {
        seed: o.seed,
        tokens: o.tokens,
        prompt_len: o.prompt_len,
        iters: o.iters,
        config: Config::new(o.dim, o.layers, o.heads, o.vocab, seq_len)?,
    };
    Ok(if bench {
        Command::Bench(run)
    } else {
        Command::Generate(run)
    })
}

fn parse_value<T: std::str::FromStr>(flag: &str, value: Option<&String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("missing value for {flag}"))?;
    value.parse().map_err(|_| {
        format!("invalid value for {flag}: '{value}' (expected a non-negative integer)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Command, String> {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        parse_args(&args)
    }

    fn err(args: &str) -> String {
        parse(args).unwrap_err()
    }

    #[test]
    fn parses_generate_with_overrides() {
        let Ok(Command::Generate(run)) = parse("generate --seed 7 --tokens 5 --dim 32 --heads 2")
        else {
            panic!("expected generate");
        };
        assert_eq!((run.seed, run.tokens, run.prompt_len), (7, 5, 4));
        assert_eq!(
            (run.config.dim, run.config.heads, run.config.layers),
            (32, 2, 2)
        );
        assert_eq!(run.config.seq_len, 9);
    }

    #[test]
    fn help_and_version() {
        assert_eq!(parse("--help"), Ok(Command::Help));
        assert_eq!(parse("-h"), Ok(Command::Help));
        assert_eq!(parse("generate --help"), Ok(Command::Help));
        assert_eq!(parse("--version"), Ok(Command::Version));
        assert!(matches!(parse("bench --iters 2"), Ok(Command::Bench(r)) if r.iters == 2));
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(err("").contains("missing command"));
        assert!(err("frobnicate").contains("unknown command"));
        assert!(err("generate --bogus 1").contains("unknown argument '--bogus'"));
        assert!(err("generate --iters 2").contains("unknown argument"));
        assert!(err("generate --tokens").contains("missing value for --tokens"));
        assert!(err("generate --tokens abc").contains("invalid value for --tokens: 'abc'"));
        assert!(err("generate --seed -1").contains("invalid value for --seed"));
        assert!(err("generate --tokens 0").contains("--tokens must be at least 1"));
        assert!(err("generate --dim 64 --heads 5").contains("divisible"));
        assert!(err("generate --dim 12 --heads 4").contains("even"));
        assert!(err("generate --tokens 1021").contains("1024"));
        assert!(err("generate --tokens 18446744073709551615").contains("too large"));
        assert!(err("generate --dim 18446744073709551612 --heads 2").contains("too large"));
    }
}
