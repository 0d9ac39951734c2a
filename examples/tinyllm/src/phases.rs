//! Where `bench` spends its time, for the `phase-times` feature.
//!
//! With the feature, `timed` adds the wall time of each call to a per-thread total and
//! `bench` prints the totals to stderr. Without it (the default) `timed` is a plain call
//! and nothing is measured, so release builds carry no timing code.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Learning the tokenizer's merges.
    Train,
    /// Text to token ids.
    Encode,
    /// The transformer, prompt and generated tokens; includes `Matmul`.
    Forward,
    /// Matrix-vector products, all of them inside `Forward`.
    Matmul,
    /// Choosing each next token from the logits.
    Sample,
    /// Token ids to text.
    Decode,
}

#[inline(always)]
pub fn timed<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "phase-times")]
    {
        let start = std::time::Instant::now();
        let out = f();
        imp::add(phase, start.elapsed());
        out
    }
    #[cfg(not(feature = "phase-times"))]
    {
        let _ = phase;
        f()
    }
}

/// A one-line breakdown of the time recorded on this thread, which is then reset;
/// `None` without the feature.
pub fn take_report(elapsed: std::time::Duration) -> Option<String> {
    #[cfg(feature = "phase-times")]
    {
        Some(imp::report(elapsed))
    }
    #[cfg(not(feature = "phase-times"))]
    {
        let _ = elapsed;
        None
    }
}

#[cfg(feature = "phase-times")]
mod imp {
    use super::Phase;
    use std::cell::Cell;
    use std::time::Duration;

    const PHASES: usize = 6;

    thread_local! {
        static TOTALS: Cell<[Duration; PHASES]> = const { Cell::new([Duration::ZERO; PHASES]) };
    }

    pub fn add(phase: Phase, d: Duration) {
        TOTALS.with(|t| {
            let mut totals = t.get();
            totals[phase as usize] += d;
            t.set(totals);
        });
    }

    pub fn report(elapsed: Duration) -> String {
        let t = TOTALS.with(|t| t.replace([Duration::ZERO; PHASES]));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let get = |p: Phase| ms(t[p as usize]);
        let total = ms(elapsed);
        let matmul = get(Phase::Matmul);
        let accounted = get(Phase::Train)
            + get(Phase::Encode)
            + get(Phase::Forward)
            + get(Phase::Sample)
            + get(Phase::Decode);
        format!(
            "phase-times: train {:.1} ms, encode {:.1} ms, forward {:.1} ms \
             (matmul {:.1}, rest {:.1}), sample {:.1} ms, decode {:.1} ms, other {:.1} ms; \
             total {:.1} ms, outside matmul {:.1}%",
            get(Phase::Train),
            get(Phase::Encode),
            get(Phase::Forward),
            matmul,
            get(Phase::Forward) - matmul,
            get(Phase::Sample),
            get(Phase::Decode),
            total - accounted,
            total,
            100.0 * (total - matmul) / total,
        )
    }
}
