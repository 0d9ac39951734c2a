use std::hash::Hasher;
use std::process::ExitCode;
use std::time::Instant;

use tinyllm::backend;
use tinyllm::cli::{self, Command, Run};
use tinyllm::model::{self, Model};
use tinyllm::phases;
use tinyllm::sampler::Sampler;
use tinyllm::text::Language;
use tinyllm::tokenizer::{escape_line, Fnv1a};
use tinyllm::workload::{self, Request};

fn main() -> ExitCode {
    // Lossy conversion turns non-UTF-8 arguments into an ordinary usage error.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let result = match cli::parse_args(&args) {
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            Ok(())
        }
        Ok(Command::Version) => {
            println!(
                "tinyllm {} (backends: {})",
                env!("CARGO_PKG_VERSION"),
                backend::compiled().join(", ")
            );
            Ok(())
        }
        Ok(Command::Generate(run)) => select_backend(&run).and_then(|()| generate(&run)),
        Ok(Command::Bench(run)) => select_backend(&run).map(|()| bench(&run)),
        Err(message) => Err(message),
    };
    if let Err(message) = result {
        eprintln!("tinyllm: error: {message}");
        eprintln!("Run 'tinyllm --help' for usage.");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

/// Announces a GPU on stderr (stdout stays comparable between backends' runs).
fn select_backend(run: &Run) -> Result<(), String> {
    if let Some(device) = backend::select(run.backend)? {
        eprintln!("tinyllm: matmuls on {device}");
    }
    Ok(())
}

fn generate(run: &Run) -> Result<(), String> {
    let tokenizer = workload::tokenizer_for(&Language::new(run.seed), run.config.vocab);
    let (prompt, config) = match &run.prompt {
        Some(text) => {
            let ids = tokenizer.encode(text);
            let config = run.config.with_seq_len(ids.len() + run.tokens)?;
            (ids, config)
        }
        None => {
            let ids = model::prompt_tokens(run.seed, run.config.vocab, run.prompt_len);
            (ids, run.config.clone())
        }
    };
    let model = Model::new(config, run.seed);
    let mut sampler = Sampler::new(run.sampling, workload::sampler_seed(run.seed, 0, 0));
    let out = model::generate_with(&model, &prompt, run.tokens, &mut sampler);
    let ids: Vec<String> = out.tokens.iter().map(u32::to_string).collect();
    println!("tokens: {}", ids.join(" "));
    println!("checksum: {:016x}", out.checksum());
    let text = tokenizer.decode(&out.tokens);
    println!("text: {}", escape_line(&String::from_utf8_lossy(&text)));
    Ok(())
}

/// Times the pipeline: training the tokenizer, then per iteration a batch of prompts,
/// each encoded, generated from with sampling and decoded. Building the weights and
/// writing the prompt texts (the requests) are excluded.
fn bench(run: &Run) {
    let model = Model::new(run.config.clone(), run.seed);
    let language = Language::new(run.seed);
    let texts = workload::prompt_texts(&language, run.iters, run.prompt_len);
    let start = Instant::now();
    let tokenizer = workload::tokenizer_for(&language, run.config.vocab);
    let mut hash = Fnv1a::default();
    for (i, batch) in texts.iter().enumerate() {
        for (j, text) in batch.iter().enumerate() {
            let request = Request {
                text,
                max_prompt: run.prompt_len,
                tokens: run.tokens,
                sampling: run.sampling,
                seed: workload::sampler_seed(run.seed, i, j),
            };
            workload::serve(&model, &tokenizer, &request, &mut hash);
        }
    }
    let elapsed = start.elapsed();
    let secs = elapsed.as_secs_f64();
    let generated = run.iters * workload::BATCH * run.tokens;
    println!("tokens/s: {:.1}", generated as f64 / secs);
    println!("elapsed_ms: {:.3}", secs * 1e3);
    // Lets a harness confirm that an optimised build still computes the same thing.
    println!("checksum: {:016x}", hash.finish());
    if let Some(report) = phases::take_report(elapsed) {
        eprintln!("{report}");
    }
}
