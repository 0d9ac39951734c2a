//! Hand-rolled argument parsing, to keep the dependency graph small.

use crate::backend::Backend;
use crate::model::Config;
use crate::sampler::SamplerConfig;
use crate::tokenizer::BYTE_TOKENS;

pub const USAGE: &str = "\
tinyllm: a tiny deterministic transformer inference benchmark

USAGE:
    tinyllm generate [OPTIONS]   generate tokens, print them, a checksum and the text
    tinyllm bench [OPTIONS]      time tokenizing, generating and detokenizing batches
                                 of prompts; print generated tokens/s
    tinyllm --help | --version

OPTIONS (generate default / bench default):
    --seed S           seed of weights, tokenizer, prompts, sampling   (0 / 0)
    --tokens N         tokens to generate per prompt                   (16 / 128)
    --layers L         transformer blocks                              (2 / 4)
    --dim D            model width                                     (64 / 64)
    --heads H          attention heads; D/H even                       (4 / 4)
    --vocab V          vocabulary size, of the model and the tokenizer (256 / 8192)
    --prompt TEXT      generate only: the prompt, tokenized            (- / -)
    --prompt-len P     generate: tokens of a prompt derived from the   (4 / 64)
                       seed, used without --prompt; bench: the longest
                       prompt, longer ones keep their last P tokens
    --temperature T    0 picks the likeliest token (greedy)            (0 / 0.8)
    --top-k K          sample among the K likeliest; 0 = all           (40 / 40)
    --top-p P          ... and the fewest whose probability reaches P  (0.95 / 0.95)
    --iters K          bench only: batches of 4 prompts, each longer   (- / 16)
    --backend B        where matmuls run: cpu, cuda, rocm, or auto     (auto / auto)
                       (auto: a GPU whose kernels this binary carries
                       and whose driver is installed, else the CPU)

The tokenizer is byte-level BPE, trained on text generated from the seed, with a
vocabulary of V tokens; --prompt and bench need V >= 256, the byte tokens.
prompt length + tokens must not exceed 1024.
";

#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub seed: u64,
    pub tokens: usize,
    /// Without `prompt`, the length of the seed's prompt; for bench, the longest prompt.
    pub prompt_len: usize,
    /// Prompt text to encode (generate only). Its length in tokens is only known once it
    /// is encoded, so until then `config.seq_len` assumes a one-token prompt.
    pub prompt: Option<String>,
    pub iters: usize,
    pub sampling: SamplerConfig,
    pub config: Config,
    pub backend: Backend,
}

#[derive(Debug, PartialEq)]
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
    prompt: Option<String>,
    prompt_len: usize,
    iters: usize,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    backend: Backend,
}

const GENERATE_DEFAULTS: Options = Options {
    seed: 0,
    tokens: 16,
    layers: 2,
    dim: 64,
    heads: 4,
    vocab: 256,
    prompt: None,
    prompt_len: 4,
    iters: 1,
    temperature: 0.0,
    top_k: 40,
    top_p: 0.95,
    backend: Backend::Auto,
};

const BENCH_DEFAULTS: Options = Options {
    seed: 0,
    tokens: 128,
    layers: 4,
    dim: 64,
    heads: 4,
    vocab: 8192,
    prompt: None,
    prompt_len: 64,
    iters: 16,
    temperature: 0.8,
    top_k: 40,
    top_p: 0.95,
    backend: Backend::Auto,
};

const INTEGER: &str = "a non-negative integer";
const NUMBER: &str = "a number";

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
    let mut prompt_len_given = false;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        if matches!(flag.as_str(), "-h" | "--help") {
            return Ok(Command::Help);
        }
        let value = it.next();
        match flag.as_str() {
            "--seed" => o.seed = parse_value(flag, value, INTEGER)?,
            "--temperature" => o.temperature = parse_value(flag, value, NUMBER)?,
            "--top-p" => o.top_p = parse_value(flag, value, NUMBER)?,
            "--backend" => {
                let text = value.ok_or_else(|| format!("missing value for {flag}"))?;
                o.backend = Backend::parse(text)?;
            }
            "--prompt" if !bench => {
                let text = value.ok_or_else(|| format!("missing value for {flag}"))?;
                o.prompt = Some(text.clone());
            }
            _ => {
                let field = match flag.as_str() {
                    "--tokens" => &mut o.tokens,
                    "--layers" => &mut o.layers,
                    "--dim" => &mut o.dim,
                    "--heads" => &mut o.heads,
                    "--vocab" => &mut o.vocab,
                    "--prompt-len" => {
                        prompt_len_given = true;
                        &mut o.prompt_len
                    }
                    "--top-k" => &mut o.top_k,
                    "--iters" if bench => &mut o.iters,
                    _ => return Err(format!("unknown argument '{flag}'")),
                };
                *field = parse_value(flag, value, INTEGER)?;
            }
        }
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
    if !(o.temperature.is_finite() && o.temperature >= 0.0) {
        return Err("--temperature must be a finite number, 0 or more".into());
    }
    if !(o.top_p > 0.0 && o.top_p <= 1.0) {
        return Err("--top-p must be more than 0 and at most 1".into());
    }
    let needs_tokenizer = if let Some(text) = &o.prompt {
        if prompt_len_given {
            return Err("--prompt and --prompt-len cannot be used together".into());
        }
        if text.is_empty() {
            return Err("--prompt must not be empty".into());
        }
        o.prompt_len = 1;
        Some("--prompt")
    } else {
        bench.then_some("bench")
    };
    if let Some(what) = needs_tokenizer {
        if o.vocab < BYTE_TOKENS {
            return Err(format!(
                "{what} needs --vocab {BYTE_TOKENS} or more (the tokenizer's byte tokens)"
            ));
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
        prompt: o.prompt,
        iters: o.iters,
        sampling: SamplerConfig {
            temperature: o.temperature,
            top_k: o.top_k,
            top_p: o.top_p,
        },
        config: Config::new(o.dim, o.layers, o.heads, o.vocab, seq_len)?,
        backend: o.backend,
    };
    Ok(if bench {
        Command::Bench(run)
    } else {
        Command::Generate(run)
    })
}

fn parse_value<T: std::str::FromStr>(
    flag: &str,
    value: Option<&String>,
    expected: &str,
) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("missing value for {flag}"))?;
    value
        .parse()
        .map_err(|_| format!("invalid value for {flag}: '{value}' (expected {expected})"))
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
    fn parses_prompt_and_sampling() {
        let args: Vec<String> = [
            "generate",
            "--prompt",
            "Hello there",
            "--temperature",
            "0.8",
        ]
        .map(String::from)
        .to_vec();
        let Ok(Command::Generate(run)) = parse_args(&args) else {
            panic!("expected generate");
        };
        assert_eq!(run.prompt.as_deref(), Some("Hello there"));
        assert_eq!(run.config.seq_len, 1 + 16);
        let want = SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
        };
        assert_eq!(run.sampling, want);

        let Ok(Command::Generate(run)) = parse("generate --top-k 0 --top-p 1") else {
            panic!("expected generate");
        };
        assert!(run.sampling.is_greedy() && run.prompt.is_none());
        assert_eq!((run.sampling.top_k, run.sampling.top_p), (0, 1.0));

        let Ok(Command::Bench(run)) = parse("bench --temperature 0 --top-k 7") else {
            panic!("expected bench");
        };
        assert_eq!((run.sampling.temperature, run.sampling.top_k), (0.0, 7));
        let Ok(Command::Bench(run)) = parse("bench") else {
            panic!("expected bench");
        };
        assert_eq!(run.sampling, want);
        assert_eq!(run.config.seq_len, run.prompt_len + run.tokens);
    }

    #[test]
    fn rejects_bad_sampling_and_prompts() {
        assert!(err("generate --temperature -1").contains("--temperature must be"));
        assert!(err("generate --temperature inf").contains("--temperature must be"));
        assert!(err("generate --temperature NaN").contains("--temperature must be"));
        assert!(err("generate --temperature hot").contains("expected a number"));
        assert!(err("generate --top-p 0").contains("--top-p must be"));
        assert!(err("generate --top-p 1.01").contains("--top-p must be"));
        assert!(err("generate --top-k -3").contains("invalid value for --top-k"));
        assert!(err("generate --prompt").contains("missing value for --prompt"));
        assert!(err("generate --prompt hi --prompt-len 3").contains("cannot be used together"));
        assert!(err("bench --prompt hi").contains("unknown argument '--prompt'"));
        assert!(err("generate --prompt hi --vocab 100").contains("--vocab 256 or more"));
        assert!(err("bench --vocab 255").contains("bench needs --vocab 256"));
        assert!(parse("generate --vocab 100").is_ok());
        assert!(err("generate --prompt hi --tokens 1024").contains("1024"));
        let empty = ["generate", "--prompt", ""].map(String::from);
        assert!(parse_args(&empty)
            .unwrap_err()
            .contains("must not be empty"));
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
