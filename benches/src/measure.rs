//! Running one command and measuring it: wall time, CPU time (user + system, its children
//! included) and peak resident memory, from `wait4(2)`'s resource usage.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One measured run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Sample {
    pub wall_s: f64,
    pub cpu_s: f64,
    /// The part of `cpu_s` spent in the kernel (system time).
    pub sys_s: f64,
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
    let out_t = drain(child.stdout.take().expect("piped"));
    let err_t = drain(child.stderr.take().expect("piped"));
    let usage = wait(child.id(), &shown, || {
        String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned()
    })?;
    let wall_s = start.elapsed().as_secs_f64();
    let stdout = out_t.join().unwrap_or_default();
    Ok((Sample::of(wall_s, &usage), stdout))
}

/// Run `cmds` at once and wait for all of them: wall time from the first spawn to the last
/// exit, CPU and system time summed, peak RSS the largest; with each one's stdout.
pub fn run_all(cmds: &mut [Command]) -> anyhow::Result<(Sample, Vec<Vec<u8>>)> {
    let start = Instant::now();
    let children = cmds
        .iter_mut()
        .map(|cmd| {
            let shown = format!("{cmd:?}");
            let mut child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("start {shown}"))?;
            let out = drain(child.stdout.take().expect("piped"));
            let err = drain(child.stderr.take().expect("piped"));
            Ok((child, shown, out, err))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut total = Sample::default();
    let mut outs = Vec::new();
    for (child, shown, out, err) in children {
        let usage = wait(child.id(), &shown, || {
            String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned()
        })?;
        let s = Sample::of(0.0, &usage);
        total.cpu_s += s.cpu_s;
        total.sys_s += s.sys_s;
        total.max_rss_mb = total.max_rss_mb.max(s.max_rss_mb);
        outs.push(out.join().unwrap_or_default());
    }
    total.wall_s = start.elapsed().as_secs_f64();
    Ok((total, outs))
}

/// Read a pipe to its end on a thread, so a chatty command cannot block on a full pipe.
fn drain(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        b
    })
}

impl Sample {
    fn of(wall_s: f64, usage: &libc::rusage) -> Self {
        Sample {
            wall_s,
            cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            sys_s: seconds(usage.ru_stime),
            max_rss_mb: usage.ru_maxrss as f64 / 1024.0,
        }
    }
}

/// Wait for child `pid` and return its resource usage; a failed exit is an error carrying
/// its stderr.
fn wait(pid: u32, shown: &str, stderr: impl FnOnce() -> String) -> anyhow::Result<libc::rusage> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let got = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    if got < 0 {
        bail!("wait for {shown}: {}", std::io::Error::last_os_error());
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        bail!("{shown} failed (wait status {status}): {}", stderr().trim());
    }
    Ok(usage)
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

/// A virtual environment at `venv` where `check` (Python) succeeds, made with `packages`
/// (pinned `NAME==VERSION`) when it does not; its interpreter. `who` names the benchmark in
/// what it prints.
pub fn venv(venv: &Path, check: &str, packages: &[&str], who: &str) -> anyhow::Result<PathBuf> {
    let python = venv.join("bin/python");
    let ok = |p: &Path| {
        Command::new(p)
            .args(["-c", check])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(&python) {
        eprintln!(
            "{who}: installing {} into {}",
            packages.join(" "),
            venv.display()
        );
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .status()?;
        if !st.success() {
            bail!("python3 -m venv failed");
        }
        let st = Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args(packages)
            .status()?;
        if !st.success() || !ok(&python) {
            bail!("pip install {} failed", packages.join(" "));
        }
    }
    Ok(python)
}

/// Write the benchmarks' imagery scene (`peers/imagery_scene.py`, seed 7) of `size`² to `out`,
/// with Debian's Python (GDAL's bindings and NumPy from apt, `.ci/setup`).
pub fn imagery_scene(out: &Path, size: u32) -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/imagery_scene.py");
    run(Command::new("/usr/bin/python3")
        .arg(script)
        .arg(out)
        .arg(size.to_string())
        .arg("7"))?;
    Ok(())
}
