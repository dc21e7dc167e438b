//! The wait queue's hand-off (issue 27): waiters sleep on their own FIFO and are woken when a
//! lease ends or the waiter ahead leaves; only a head polls NVML, every 2 s, for GPUs freed
//! outside gpurun. Through the binary on the simulator.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{scenario_file, wait_until, Sim};

const LONG: Duration = Duration::from_secs(20);

fn spawn(sim: &Sim, args: &[&str]) -> Child {
    let mut command: Command = sim.gpurun().args(["-q"]).args(args).command;
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// A launch whose -vv trace goes to `trace` (the waiter's own account of each look).
fn spawn_traced(sim: &Sim, args: &[&str], trace: &std::path::Path) -> Child {
    let mut command: Command = sim.gpurun().args(["-vv"]).args(args).command;
    let log = std::fs::File::create(trace).unwrap();
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

/// Why the traced waiter looked at the machine again, each time, in order
/// ("the safety poll", "its FIFO was written", "a quick look after a lease's end", ...).
fn looks_again(trace: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(trace).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once("looking again: ").map(|(_, why)| why.to_owned()))
        .collect()
}

/// The looks since the first `since` of them.
fn looks_since(trace: &std::path::Path, since: usize) -> Vec<String> {
    looks_again(trace).into_iter().skip(since).collect()
}

fn entries(sim: &Sim, prefix: &str) -> usize {
    std::fs::read_dir(sim.lock_dir())
        .map(|all| all.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).count())
        .unwrap_or(0)
}

/// GPU 0 held for 2 s, and two `--wait` launches queued for it in turn: (sim, holder, head,
/// second).
fn two_waiting_behind_a_holder() -> (Sim, Child, Child, Child) {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let holder = spawn(&sim, &["--exclusive", "--devices", "0", "--", "sleep", "2"]);
    assert!(wait_until(LONG, || leases(&sim) == 1));
    let head = spawn(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"]);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 1));
    let second = spawn(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"]);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 2));
    (sim, holder, head, second)
}

fn leases(sim: &Sim) -> usize {
    common::leases_in(&sim.lock_dir())
}

#[test]
fn a_waiter_sleeps_and_starts_when_a_lease_ends() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    // The holder stays until the test ends it.
    let mut holder = spawn(&sim, &["--exclusive", "--devices", "0", "--", "sleep", "600"]);
    assert!(wait_until(LONG, || leases(&sim) == 1));
    let trace = sim.dir.path().join("waiter.log");
    let mut waiter = spawn_traced(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"], &trace);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 1 && entries(&sim, "wake.") == 1));
    // Asleep: with nothing to wake it, a head looks again only for its safety poll (every 2 s),
    // never because its FIFO read as ready (a FIFO without a writer reads as end-of-file: a
    // waiter that took that for a wake-up looked in a loop, a whole core).
    assert!(wait_until(common::HANG, || looks_again(&trace).len() >= 2), "{:?}", looks_again(&trace));
    let looks = looks_again(&trace);
    assert!(looks.iter().all(|why| why == "the safety poll"), "{looks:?}");
    common::send_signal(holder.id(), libc::SIGTERM);
    holder.wait().unwrap();
    // Its lease's end wakes the waiter, which starts (the hand-off's latency is the bench's).
    assert!(common::wait_unless_hung(&mut waiter).success());
    assert_eq!(entries(&sim, "wake."), 0, "the FIFO goes with the ticket");
}

#[test]
fn a_waiter_starts_when_a_process_outside_gpurun_frees_the_gpu() {
    // A foreign process (not under gpurun) on GPU 0: --exclusive waits for it to end.
    let idle = scenario_file("two_idle.toml");
    let sim = Sim::new(&(idle.clone() + "\n[[process]]\ngpu = 0\npid = 4190001\nused = \"1GiB\"\n"));
    let mut waiter = spawn(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"]);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 1));
    std::thread::sleep(Duration::from_millis(500));
    assert!(waiter.try_wait().unwrap().is_none(), "started while the foreign process held the GPU");
    // It ends: NVML no longer lists it. No lease ended, so nobody wakes the waiter: the head's
    // safety poll (2 s) finds the GPU free.
    sim.rewrite(&idle);
    assert!(common::wait_unless_hung(&mut waiter).success(), "the safety poll never found the GPU free");
}

#[test]
fn a_killed_head_does_not_stall_the_queue() {
    let (_sim, mut holder, mut head, mut second) = two_waiting_behind_a_holder();
    // Killed outright: no turn passed on, its ticket and FIFO left behind.
    head.kill().unwrap();
    head.wait().unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(common::wait_unless_hung(&mut second).success(), "the killed head stalled the queue");
}

#[test]
fn a_woken_waiter_that_cannot_start_goes_back_to_sleep() {
    // A FIFO whose writer has closed it reads as end-of-file until another writer comes: a
    // waiter once woken found its FIFO ready at every wait and looked at the machine in a loop
    // (a whole core, 2.9 s of CPU in 3 s). Woken twice here: the waiter ahead leaves (the turn
    // passes), and a lease on the other GPU ends (a lease's end it cannot use).
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let mut zero = spawn(&sim, &["--exclusive", "--devices", "0", "--", "sleep", "600"]);
    let mut one = spawn(&sim, &["--exclusive", "--devices", "1", "--", "sleep", "600"]);
    assert!(wait_until(LONG, || leases(&sim) == 2));
    let mut ahead = spawn(&sim, &["--exclusive", "--gpus", "2", "--wait", "--", "true"]);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 1));
    let trace = sim.dir.path().join("waiter.log");
    let mut waiter = spawn_traced(&sim, &["--exclusive", "--gpus", "2", "--wait", "--", "true"], &trace);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 2));
    // After a wake-up it cannot use, the waiter looks once for it (and, after a lease's end,
    // its quick looks), then sleeps: its next looks are safety polls, never another wake-up
    // the FIFO did not have.
    let asleep_after = |what: &str, since: usize| {
        let polls = |looks: &[String]| looks.iter().filter(|why| *why == "the safety poll").count();
        assert!(
            wait_until(common::HANG, || polls(&looks_since(&trace, since)) >= 2),
            "after {what}: {:?}",
            looks_since(&trace, since)
        );
        let looks = looks_since(&trace, since);
        let woken = looks.iter().filter(|why| why.starts_with("its FIFO was written")).count();
        assert!(woken <= 1, "after {what}, woken {woken} times: {looks:?}");
        assert!(still_waiting(&trace), "started after {what} with GPU 0 held");
    };
    let terminate = |child: &Child| {
        // SAFETY: kill(2) on our own child's PID.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    };
    // Ended by a signal, the waiter ahead passes the turn on as it leaves.
    let since = looks_again(&trace).len();
    terminate(&ahead);
    ahead.wait().unwrap();
    asleep_after("the waiter ahead left", since);
    // SIGTERM goes to the holder's command; its gpurun then releases GPU 1 and wakes the head.
    let since = looks_again(&trace).len();
    terminate(&one);
    one.wait().unwrap();
    asleep_after("a lease ended", since);
    zero.kill().unwrap();
    zero.wait().unwrap();
    assert!(common::wait_unless_hung(&mut waiter).success());
}

/// Whether the traced waiter is still waiting (it has not said it runs its command).
fn still_waiting(trace: &std::path::Path) -> bool {
    !std::fs::read_to_string(trace).unwrap_or_default().contains("gpurun: running ")
}

#[test]
fn a_waiter_for_other_gpus_is_not_woken_and_the_turn_passes_in_order() {
    // GPU 0 and GPU 1 held; a waiter for each; ending GPU 1's holder starts GPU 1's waiter only.
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let mut zero = spawn(&sim, &["--exclusive", "--devices", "0", "--", "sleep", "30"]);
    let mut one = spawn(&sim, &["--exclusive", "--devices", "1", "--", "sleep", "2"]);
    assert!(wait_until(LONG, || leases(&sim) == 2));
    let mut for_zero = spawn(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"]);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 1));
    let mut for_one = spawn(&sim, &["--exclusive", "--devices", "1", "--wait", "--", "true"]);
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 2));
    assert!(one.wait().unwrap().success());
    assert!(for_one.wait().unwrap().success());
    assert!(for_zero.try_wait().unwrap().is_none(), "GPU 0 is still held");
    zero.kill().unwrap();
    zero.wait().unwrap();
    for_zero.kill().unwrap();
    for_zero.wait().unwrap();
}

#[test]
fn list_shows_the_queues_length_and_with_v_every_waiter_and_the_oldest_wait() {
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let mut holder = spawn(&sim, &["--exclusive", "--devices", "0", "--", "sleep", "30"]);
    assert!(wait_until(LONG, || leases(&sim) == 1));
    let mut waiters: Vec<Child> =
        (0..12).map(|_| spawn(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"])).collect();
    assert!(wait_until(LONG, || entries(&sim, "ticket.") == 12));
    let listing = sim.gpurun().args(["--list"]).run();
    listing
        .status(0)
        .stdout_has("waiting (first come, first served): 12 launches\n")
        .stdout_has("  10. ")
        .stdout_has("  ... and 2 more (-v lists them all)\n");
    assert!(!listing.stdout.contains("  11. "), "{}", listing.stdout);
    assert!(!listing.stdout.contains("the oldest has waited"));
    let verbose = sim.gpurun().args(["-v", "--list"]).run();
    verbose.status(0).stdout_has("  the oldest has waited ").stdout_has("  12. ");
    assert!(!verbose.stdout.contains("more (-v"));
    for waiter in &mut waiters {
        waiter.kill().unwrap();
        waiter.wait().unwrap();
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// Issue 36 (4): a head stopped with Ctrl-Z or SIGSTOP took the only wake-up, and the waiter
/// behind it never probed (not a head) while the GPU sat free, until the head was continued.
/// A stopped waiter holds no place while it is stopped.
#[test]
fn a_stopped_waiter_does_not_hold_up_the_queue() {
    let (_sim, mut holder, mut head, mut second) = two_waiting_behind_a_holder();
    common::send_signal(head.id(), libc::SIGSTOP);
    assert!(holder.wait().unwrap().success());
    // Stopped for good here: behind it, the second would wait for ever.
    assert!(common::wait_unless_hung(&mut second).success(), "a stopped head stalled the queue");
    // Continued, it has its place back and runs.
    common::send_signal(head.id(), libc::SIGCONT);
    assert!(common::wait_unless_hung(&mut head).success());
}

/// Issue 36 (5): a waiter's FIFO is anybody's to write (mode 0622), and each byte cost it a look
/// at the machine (8,261 bytes in 5 s: 0.73 s of CPU). Looks after a burst are paced to 10 a
/// second; the real hand-off still comes through the flood.
#[test]
fn a_flood_of_wake_up_bytes_is_paced() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let sim = Sim::new(&scenario_file("two_idle.toml"));
    let mut holder = spawn(&sim, &["--exclusive", "--devices", "0", "--", "sleep", "600"]);
    assert!(wait_until(LONG, || leases(&sim) == 1));
    let trace = sim.dir.path().join("waiter.log");
    let mut waiter = spawn_traced(&sim, &["--exclusive", "--devices", "0", "--wait", "--", "true"], &trace);
    assert!(wait_until(LONG, || entries(&sim, "wake.") == 1));
    let fifo = std::fs::read_dir(sim.lock_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("wake."))
        .unwrap();
    let mut writer =
        std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
    // Flooded (LEASE_ENDED, the byte that also earns the quick looks) until the waiter paces
    // its looks: a burst of them at once, then spaced, never a look per byte.
    let paced = |looks: &[String]| looks.iter().any(|why| why.contains("paced"));
    let flooding = wait_until(common::HANG, || {
        let _ = writer.write(&[1; 16]);
        paced(&looks_again(&trace))
    });
    let looks = looks_again(&trace);
    assert!(flooding, "the flood was never paced: {looks:?}");
    let unpaced = looks.iter().take_while(|why| !why.contains("paced")).count();
    assert!(unpaced >= 8, "paced before its burst of 8 looks: {looks:?}");
    common::send_signal(holder.id(), libc::SIGTERM);
    assert!(common::wait_unless_hung(&mut waiter).success(), "the hand-off after the flood");
    holder.wait().unwrap();
}
