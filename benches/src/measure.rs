//! Running one command and measuring it: wall time, CPU time (user + system, its children
//! included) and peak resident memory, from `wait4(2)`'s resource usage.

use anyhow::{Context, bail};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One measured run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Sample {
    pub wall_s: f64,
    pub cpu_s: f64,
    /// Peak resident set of the process, or of its largest descendant for a pipeline.
    pub max_rss_mb: f64,
}

fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// Run `cmd` to completion; its stdout is returned, its stderr shown on failure.
pub fn run(cmd: &mut Command) -> anyhow::Result<(Sample, Vec<u8>)> {
    let shown = format!("{cmd:?}");
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {shown}"))?;
    // Read the pipes on threads so a chatty command cannot block on a full pipe.
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut b);
        b
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let wall_s = start.elapsed().as_secs_f64();
    if pid < 0 {
        bail!("wait for {shown}: {}", std::io::Error::last_os_error());
    }
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        bail!(
            "{shown} failed (wait status {status}): {}",
            String::from_utf8_lossy(&stderr).trim()
        );
    }
    Ok((
        Sample {
            wall_s,
            cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            max_rss_mb: usage.ru_maxrss as f64 / 1024.0,
        },
        stdout,
    ))
}

/// Median, minimum and maximum of the samples' wall times.
pub fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}
