//! What handing work to a blocking thread and back costs on this machine, against the
//! durable append the time-to-first-token target compares with (`cargo bench -p
//! parlor-server --bench handover`; results in docs/performance.md, issue 48).
//!
//! A turn's file operations run on tokio's blocking threads, as any blocking I/O must, so
//! each one pays two thread wake-ups (there and back) on top of its own work. Turns arrive
//! one at a time with pauses in between, so the threads and the CPUs are asleep when a turn
//! comes: every sample here is taken after 1 ms of idleness, as `bench.py`'s turns are.
//!
//! Four figures, medians and p90 of 400 samples, in microseconds, as one JSON object:
//! - `wake_round_trip`: `spawn_blocking` of nothing, and back;
//! - `append_inline`: a 720-byte append and `fdatasync`, timed on the thread that does it
//!   (what `bench.py` calls the journal append);
//! - `append_handed_over`: the same append through `spawn_blocking`, timed from the
//!   runtime (what a turn waits for);
//! - `handover_cost`: the difference of the two medians.
//!
//! The directory is `PARLOR_BENCH_DIR` (default `target/`), so that the disk is the one
//! `bench.py` measures; never `/tmp`, which may be memory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

const SAMPLES: usize = 400;
const IDLE: Duration = Duration::from_millis(1);

fn stats(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn append(file: &mut std::fs::File) -> f64 {
    let start = Instant::now();
    file.write_all(&[b'x'; 720]).expect("append");
    file.sync_data().expect("fdatasync");
    start.elapsed().as_secs_f64() * 1e6
}

/// A fixed piece of CPU work (about 100 µs here), its time in microseconds.
fn work() -> f64 {
    let start = Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..60_000u64 {
        x = std::hint::black_box(x.rotate_left(7) ^ i).wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    std::hint::black_box(x);
    start.elapsed().as_secs_f64() * 1e6
}

/// The same work alone and while another thread appends and syncs, alternating after
/// pauses: whether a sync takes CPU time from the machine's other work (on a virtual
/// machine, the host may serve the disk with the time of the guest's CPUs).
fn work_beside_sync(file: &std::sync::Mutex<std::fs::File>) -> (Vec<f64>, Vec<f64>) {
    let (mut alone, mut beside) = (vec![], vec![]);
    for _ in 0..SAMPLES {
        std::thread::sleep(IDLE);
        alone.push(work());
        std::thread::sleep(IDLE);
        std::thread::scope(|s| {
            let syncing = s.spawn(|| append(&mut file.lock().unwrap()));
            // The sync under way (its write issued) before the work starts.
            std::thread::sleep(Duration::from_micros(20));
            beside.push(work());
            syncing.join().expect("append");
        });
    }
    (alone, beside)
}

fn main() {
    let dir = std::env::var_os("PARLOR_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let path = dir.join(format!("handover-{}.log", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .expect("log file");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let file = std::sync::Arc::new(std::sync::Mutex::new(file));
    let (wakes, inline, handed) = runtime.block_on(async {
        let (mut wakes, mut inline, mut handed) = (vec![], vec![], vec![]);
        for _ in 0..SAMPLES {
            tokio::time::sleep(IDLE).await;
            let start = Instant::now();
            tokio::task::spawn_blocking(|| ()).await.expect("no-op");
            wakes.push(start.elapsed().as_secs_f64() * 1e6);

            tokio::time::sleep(IDLE).await;
            let shared = file.clone();
            let start = Instant::now();
            let own = tokio::task::spawn_blocking(move || append(&mut shared.lock().unwrap()))
                .await
                .expect("append");
            handed.push(start.elapsed().as_secs_f64() * 1e6);
            inline.push(own);
        }
        (wakes, inline, handed)
    });
    let back_to_back: Vec<f64> = {
        let mut file = file.lock().unwrap();
        (0..SAMPLES).map(|_| append(&mut file)).collect()
    };
    let (alone, beside) = work_beside_sync(&file);
    let _ = std::fs::remove_file(&path);
    let (alone, alone_p90) = stats(alone);
    let (beside, beside_p90) = stats(beside);
    let (wake, wake_p90) = stats(wakes);
    let (own, own_p90) = stats(inline);
    let (total, total_p90) = stats(handed);
    let (hot, hot_p90) = stats(back_to_back);
    println!(
        "{}",
        serde_json::json!({
            "samples": SAMPLES,
            "wake_round_trip_us": {"median": round(wake), "p90": round(wake_p90)},
            "append_inline_us": {"median": round(own), "p90": round(own_p90)},
            "append_back_to_back_us": {"median": round(hot), "p90": round(hot_p90)},
            "append_handed_over_us": {"median": round(total), "p90": round(total_p90)},
            "handover_cost_us": round(total - own),
            "work_alone_us": {"median": round(alone), "p90": round(alone_p90)},
            "work_beside_a_sync_us": {"median": round(beside), "p90": round(beside_p90)},
        })
    );
}
