use std::process::{Command, Output};

fn tinyllm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tinyllm"))
        .args(args)
        .output()
        .expect("failed to run tinyllm")
}

#[test]
fn generate_prints_tokens_and_checksum() {
    let out = tinyllm(&["generate", "--seed", "1", "--tokens", "16"]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");

    let ids: Vec<u32> = lines[0]
        .strip_prefix("tokens: ")
        .expect("tokens line")
        .split(' ')
        .map(|t| t.parse().expect("token id"))
        .collect();
    assert_eq!(ids.len(), 16);
    assert!(ids.iter().all(|&t| t < 256));

    let checksum = lines[1].strip_prefix("checksum: ").expect("checksum line");
    assert_eq!(checksum.len(), 16);
    assert!(checksum
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));

    // Deterministic across runs.
    let again = tinyllm(&["generate", "--seed", "1", "--tokens", "16"]);
    assert_eq!(stdout.as_bytes(), &again.stdout[..]);
}

#[test]
fn bad_flag_exits_with_2() {
    let out = tinyllm(&["generate", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));

    let out = tinyllm(&["generate", "--tokens", "many"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn version_and_help() {
    let out = tinyllm(&["--version"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "tinyllm 0.1.0\n");
    let out = tinyllm(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap().contains("USAGE"));
}
