use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use tinyllm::cli::{self, Command, Run};
use tinyllm::model::{self, Model};

fn main() -> ExitCode {
    // Lossy conversion turns non-UTF-8 arguments into an ordinary usage error.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match cli::parse_args(&args) {
        Ok(Command::Help) => print!("{}", cli::USAGE),
        Ok(Command::Version) => println!("tinyllm {}", env!("CARGO_PKG_VERSION")),
        Ok(Command::Generate(run)) => generate(&run),
        Ok(Command::Bench(run)) => bench(&run),
        Err(message) => {
            eprintln!("tinyllm: error: {message}");
            eprintln!("Run 'tinyllm --help' for usage.");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

fn generate(run: &Run) {
    let model = Model::new(run.config.clone(), run.seed);
    let prompt = model::prompt_tokens(run.seed, run.config.vocab, run.prompt_len);
    let out = model::generate(&model, &prompt, run.tokens);
    let ids: Vec<String> = out.tokens.iter().map(u32::to_string).collect();
    println!("tokens: {}", ids.join(" "));
    println!("checksum: {:016x}", out.checksum());
}

/// Times decoding only; building the weights is excluded.
fn bench(run: &Run) {
    let model = Model::new(run.config.clone(), run.seed);
    let prompt = model::prompt_tokens(run.seed, run.config.vocab, run.prompt_len);
    let start = Instant::now();
    let mut checksum = 0;
    for _ in 0..run.iters {
        checksum = black_box(model::generate(&model, black_box(&prompt), run.tokens)).checksum();
    }
    let secs = start.elapsed().as_secs_f64();
    println!("tokens/s: {:.1}", (run.iters * run.tokens) as f64 / secs);
    println!("elapsed_ms: {:.3}", secs * 1e3);
    // Lets a harness confirm that an optimised build still computes the same thing.
    println!("checksum: {checksum:016x}");
}
