use std::process::{Command, Output};

/// Runs the binary, through cargo's runner for this target when one is set (a cross
/// build's tests run under qemu, and so must the binary they start).
fn tinyllm(args: &[&str]) -> Output {
    let target = env!("TINYLLM_TARGET").to_uppercase().replace('-', "_");
    let runner = std::env::var(format!("CARGO_TARGET_{target}_RUNNER")).unwrap_or_default();
    let mut words = runner.split_whitespace();
    let mut command = match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(env!("CARGO_BIN_EXE_tinyllm"));
            command
        }
        None => Command::new(env!("CARGO_BIN_EXE_tinyllm")),
    };
    command.args(args).output().expect("failed to run tinyllm")
}

/// Runs a command that must succeed and returns its stdout lines.
fn lines(args: &[&str]) -> Vec<String> {
    let out = tinyllm(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    // Deterministic across runs.
    assert_eq!(stdout.as_bytes(), &tinyllm(args).stdout[..], "{args:?}");
    stdout.lines().map(String::from).collect()
}

fn token_ids(line: &str) -> Vec<u32> {
    line.strip_prefix("tokens: ")
        .expect("tokens line")
        .split(' ')
        .map(|t| t.parse().expect("token id"))
        .collect()
}

fn assert_checksum(line: &str) {
    let checksum = line.strip_prefix("checksum: ").expect("checksum line");
    assert_eq!(checksum.len(), 16);
    assert!(checksum
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
}

#[test]
fn generate_prints_tokens_checksum_and_text() {
    let out = lines(&["generate", "--seed", "1", "--tokens", "16"]);
    assert_eq!(out.len(), 3, "{out:?}");
    let ids = token_ids(&out[0]);
    assert_eq!(ids.len(), 16);
    assert!(ids.iter().all(|&t| t < 256));
    assert_checksum(&out[1]);
    let text = out[2].strip_prefix("text: ").expect("text line");
    assert!(text.bytes().all(|b| (b' '..=b'~').contains(&b)), "{text}");
    // Greedy decoding of the seed's prompt, as before the tokenizer existed.
    assert_eq!(out[1], "checksum: e097af0d0222967e");
}

#[test]
fn generate_from_a_prompt_with_sampling() {
    let base = [
        "generate", "--seed", "5", "--vocab", "512", "--tokens", "24", "--prompt",
    ];
    let prompt = "Once upon a time, a naïve fox met 3 owls.";
    let greedy = lines(&[&base[..], &[prompt]].concat());
    let sampled_args = [
        &base[..],
        &[
            prompt,
            "--temperature",
            "0.8",
            "--top-k",
            "40",
            "--top-p",
            "0.95",
        ],
    ]
    .concat();
    let sampled = lines(&sampled_args);
    for out in [&greedy, &sampled] {
        assert_eq!(out.len(), 3);
        let ids = token_ids(&out[0]);
        assert_eq!(ids.len(), 24);
        assert!(ids.iter().all(|&t| t < 512));
        assert_checksum(&out[1]);
        assert!(out[2].starts_with("text: "));
    }
    assert_ne!(greedy[0], sampled[0]);
    // Another seed samples (and weighs) differently.
    let mut other = sampled_args.clone();
    other[2] = "6";
    assert_ne!(lines(&other)[1], sampled[1]);
}

#[test]
fn bench_prints_rate_time_and_checksum() {
    let args = [
        "bench", "--iters", "1", "--tokens", "4", "--dim", "32", "--vocab", "600",
    ];
    let first = tinyllm(&args);
    assert!(first.status.success());
    let stdout = String::from_utf8(first.stdout).unwrap();
    let out: Vec<&str> = stdout.lines().collect();
    assert_eq!(out.len(), 3, "{stdout}");
    let rate: f64 = out[0].strip_prefix("tokens/s: ").unwrap().parse().unwrap();
    let ms: f64 = out[1]
        .strip_prefix("elapsed_ms: ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(rate > 0.0 && ms > 0.0);
    assert_checksum(out[2]);
    // Timings change from run to run; the checksum does not.
    let again = String::from_utf8(tinyllm(&args).stdout).unwrap();
    assert_eq!(again.lines().nth(2), Some(out[2]));
}

#[test]
fn bad_flag_exits_with_2() {
    let out = tinyllm(&["generate", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));

    let out = tinyllm(&["generate", "--tokens", "many"]);
    assert_eq!(out.status.code(), Some(2));

    // Too long once encoded: a usage error too, found after parsing.
    let long = "word ".repeat(1100);
    let out = tinyllm(&["generate", "--prompt", &long, "--tokens", "8"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1024"));
}

#[test]
fn version_and_help() {
    let out = tinyllm(&["--version"]);
    assert!(out.status.success());
    let version = String::from_utf8(out.stdout).unwrap();
    assert!(
        version.starts_with("tinyllm 0.1.0 (backends: cpu"),
        "{version}"
    );
    let out = tinyllm(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("USAGE") && help.contains("--temperature"));
}

#[test]
fn backends_cpu_and_auto_agree_and_missing_gpus_are_explained() {
    let args = ["generate", "--seed", "7", "--tokens", "12"];
    let default = lines(&args);
    let mut cpu_args = args.to_vec();
    cpu_args.extend(["--backend", "cpu"]);
    assert_eq!(lines(&cpu_args), default);
    for (backend, why) in [("cuda", "CUDA"), ("rocm", "HIP")] {
        let out = tinyllm(&["generate", "--backend", backend]);
        if out.status.success() {
            continue; // a GPU and its driver are really here
        }
        assert_eq!(out.status.code(), Some(2), "{backend}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{backend}"
        );
    }
    let out = tinyllm(&["generate", "--backend", "tpu"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected cpu, cuda, rocm or auto"));
}
