//! The TmuxSession actor's in-memory rules, without a container: the commands each request
//! runs, how command output becomes each request's answer, the set-up's queue and waiters,
//! and the screen tests the set-up waits on.

use ractor::concurrency::{OneshotReceiver, oneshot};
use tokio::sync::oneshot::error::TryRecvError;

use super::*;

const SEP: &str = "__SEP__";

/// The port of a request answered with text.
type TextReply = RpcReplyPort<Result<String, TmuxError>>;

/// A reply port and the receiving end the test reads the answer from.
fn port<T>() -> (RpcReplyPort<T>, OneshotReceiver<T>) {
    let (tx, rx) = oneshot();
    (tx.into(), rx)
}

/// A state without a channel (no container behind it), with `setup` as given.
fn state(reference: bool, setup: Setup) -> TmuxSessionState {
    TmuxSessionState {
        shell: None,
        setup,
        queue: VecDeque::new(),
        look: if reference { Look::Reference(ReferenceObserver::default()) } else { Look::Ours(Observer::default()) },
        reference,
        separator: SEP.to_string(),
        work: None,
        args: None,
        recorder: None,
    }
}

fn out(exit_code: i32, stdout: &str) -> ShellOutput {
    ShellOutput { exit_code, stdout: stdout.to_string() }
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| k.to_string()).collect()
}

fn info() -> SessionInfo {
    SessionInfo { recording_started: None, started_uptime: None }
}

// --- check ---

#[test]
fn check_passes_a_zero_exit_and_a_missing_output_through() {
    let ok = out(0, "fine\n");
    assert_eq!(check(Some(&ok), "x"), Ok(Some(&ok)));
    assert_eq!(check(None, "x"), Ok(None));
}

#[test]
fn check_turns_a_non_zero_exit_into_an_error_naming_the_command_with_its_trimmed_output() {
    let failed = out(1, "  can't find session: terminus-2\n");
    assert_eq!(
        check(Some(&failed), "capture-pane"),
        Err(TmuxError::Command { what: "capture-pane", output: "can't find session: terminus-2".into() })
    );
    assert_eq!(
        TmuxError::Command { what: "send-keys", output: "no server".into() }.to_string(),
        "send-keys failed: no server"
    );
}

// --- the screens the set-up waits for ---

#[test]
fn prompt_shown_reads_the_last_non_blank_line_only() {
    assert!(prompt_shown("root@box:/app# \n\n\n"));
    assert!(prompt_shown("welcome\nuser@box:~$ "));
    assert!(!prompt_shown("root@box:/app# ls\nLoading profile...\n"));
    assert!(!prompt_shown(""));
    assert!(!prompt_shown("\n   \n"));
}

#[test]
fn missing_tools_reads_only_the_install_scripts_report_lines() {
    assert_eq!(missing_tools("Reading package lists...\nmissing:tmux\nmissing:curl\n"), ["tmux", "curl"]);
    assert!(missing_tools("done\n").is_empty());
    // The marker must start the line.
    assert!(missing_tools("still missing:tmux\n").is_empty());
}

#[test]
fn the_ensure_tools_script_reports_missing_tools_in_the_form_missing_tools_reads() {
    assert!(ENSURE_TOOLS.contains("printf 'missing:%s\\n'"), "{ENSURE_TOOLS}");
    assert!(TOOLS_CHECK.contains("command -v tmux") && ENSURE_TOOLS.contains("need=\"tmux\""));
    assert!(ENSURE_TOOLS.trim_end().ends_with("true"), "the script itself succeeds; the report says what is missing");
}

#[test]
fn cleared_wants_exactly_one_prompt_line_without_the_clear() {
    assert!(cleared("root@box:/app# \n\n\n"));
    assert!(!cleared("root@box:/app# clear\n"), "the clear was typed but has not run");
    assert!(!cleared("Welcome to the box\nroot@box:/app# \n"), "what the login printed is still shown");
    assert!(!cleared("Python 3.12\n"), "one line, but not a prompt");
    assert!(!cleared(""));
}

// --- the commands of each request ---

#[test]
fn keys_ending_in_a_semicolon_are_escaped_unless_typed_as_the_reference_types_them() {
    let (reply, _rx) = port();
    let request = Request::SendKeys { keys: keys(&["echo hi;", "Enter"]), reply };
    let ours = request.commands(&Look::Ours(Observer::default()), false, SEP);
    assert_eq!(ours, ["tmux send-keys -t terminus-2 -- 'echo hi\\;' Enter"]);
    let reference = request.commands(&Look::Reference(ReferenceObserver::default()), true, SEP);
    assert_eq!(reference, ["tmux send-keys -t terminus-2 -- 'echo hi;' Enter"]);
}

#[test]
fn each_request_runs_its_own_tmux_command() {
    let look = Look::Ours(Observer::default());
    let commands = |request: Request| request.commands(&look, false, SEP);
    assert_eq!(
        commands(Request::CapturePane { entire: false, reply: port().0 }),
        ["tmux capture-pane -p -t terminus-2"]
    );
    assert_eq!(
        commands(Request::CapturePane { entire: true, reply: port().0 }),
        ["tmux capture-pane -p -S - -t terminus-2"]
    );
    assert_eq!(commands(Request::IsAlive(port().0)), ["tmux has-session -t terminus-2"]);
    assert_eq!(commands(Request::IdleProbe(port().0)), [tmux::idle_probe_command()]);
}

#[test]
fn an_observation_is_one_command_carrying_the_separator_of_its_observer() {
    let ours = Request::IncrementalOutput(port().0).commands(&Look::Ours(Observer::default()), false, SEP);
    let theirs =
        Request::IncrementalOutput(port().0).commands(&Look::Reference(ReferenceObserver::default()), true, SEP);
    assert_eq!((ours.len(), theirs.len()), (1, 1));
    assert!(ours[0].contains(SEP) && theirs[0].contains(SEP));
    // The reference reads the whole scrollback every time; ours does not.
    assert!(theirs[0].contains("capture-pane -p -S - -t terminus-2"), "{}", theirs[0]);
    assert!(!ours[0].contains("-S -"), "{}", ours[0]);
}

// --- answers ---

#[test]
fn a_failed_set_up_answers_is_alive_with_false_and_every_other_request_with_its_error() {
    let error = TmuxError::NotInstalled;
    let (reply, mut alive) = port();
    Request::IsAlive(reply).fail(error.clone());
    assert_eq!(alive.try_recv(), Ok(false));
    let (reply, mut sent) = port();
    Request::SendKeys { keys: keys(&["ls"]), reply }.fail(error.clone());
    assert_eq!(sent.try_recv(), Ok(Err(error.clone())));
    let (reply, mut probe) = port();
    Request::IdleProbe(reply).fail(error.clone());
    assert_eq!(probe.try_recv(), Ok(Err(error.clone())));
    let makers: [fn(TextReply) -> Request; 2] =
        [Request::IncrementalOutput, |reply| Request::CapturePane { entire: true, reply }];
    for make in makers {
        let (reply, mut rx) = port();
        make(reply).fail(error.clone());
        assert_eq!(rx.try_recv(), Ok(Err(error.clone())));
    }
}

#[test]
fn send_keys_answers_ok_or_the_output_of_the_command_that_failed() {
    let mut state = state(false, Setup::Done(info()));
    let (reply, mut rx) = port();
    state.answer(Request::SendKeys { keys: keys(&["ls"]), reply }, Ok(vec![out(0, "")]));
    assert_eq!(rx.try_recv(), Ok(Ok(())));
    // Commands stop after the first failure, so the last output is the failed one.
    let (reply, mut rx) = port();
    state.answer(Request::SendKeys { keys: keys(&["ls"]), reply }, Ok(vec![out(0, ""), out(1, "no server running\n")]));
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Command { what: "send-keys", output: "no server running".into() })));
}

#[test]
fn a_broken_channel_is_the_answer_of_any_request_that_returns_a_result() {
    let mut state = state(false, Setup::Done(info()));
    let broken = || Err(TmuxError::Channel("the container is gone".into()));
    let (reply, mut rx) = port();
    state.answer(Request::CapturePane { entire: false, reply }, broken());
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Channel("the container is gone".into()))));
    let (reply, mut rx) = port();
    state.answer(Request::IncrementalOutput(reply), broken());
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Channel("the container is gone".into()))));
    let (reply, mut rx) = port();
    state.answer(Request::IdleProbe(reply), broken());
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Channel("the container is gone".into()))));
}

#[test]
fn capture_pane_answers_the_screen_as_printed() {
    let mut state = state(false, Setup::Done(info()));
    let (reply, mut rx) = port();
    state.answer(Request::CapturePane { entire: false, reply }, Ok(vec![out(0, "root@box:/# \n\n")]));
    assert_eq!(rx.try_recv(), Ok(Ok("root@box:/# \n\n".to_string())));
    let (reply, mut rx) = port();
    state.answer(Request::CapturePane { entire: true, reply }, Ok(vec![out(1, "can't find pane\n")]));
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Command { what: "capture-pane", output: "can't find pane".into() })));
}

#[test]
fn is_alive_is_true_only_for_a_has_session_that_exited_zero() {
    let mut state = state(false, Setup::Done(info()));
    for (outputs, alive) in [
        (Ok(vec![out(0, "")]), true),
        (Ok(vec![out(1, "can't find session")]), false),
        (Ok(vec![]), false),
        (Err(TmuxError::Channel("gone".into())), false),
    ] {
        let (reply, mut rx) = port();
        state.answer(Request::IsAlive(reply), outputs);
        assert_eq!(rx.try_recv(), Ok(alive));
    }
}

#[test]
fn the_idle_probe_splits_the_foreground_program_from_the_screen() {
    let mut state = state(false, Setup::Done(info()));
    let (reply, mut rx) = port();
    state.answer(Request::IdleProbe(reply), Ok(vec![out(0, "bash\nroot@box:/# \n")]));
    assert_eq!(rx.try_recv(), Ok(Ok((true, "root@box:/# \n".to_string()))));
    let (reply, mut rx) = port();
    state.answer(Request::IdleProbe(reply), Ok(vec![out(0, "vim\n~\n~\n")]));
    assert_eq!(rx.try_recv(), Ok(Ok((false, "~\n~\n".to_string()))));
    // Only the program's line: no screen.
    let (reply, mut rx) = port();
    state.answer(Request::IdleProbe(reply), Ok(vec![out(0, "python3")]));
    assert_eq!(rx.try_recv(), Ok(Ok((false, String::new()))));
    let (reply, mut rx) = port();
    state.answer(Request::IdleProbe(reply), Ok(vec![out(1, "no server\n")]));
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Command { what: "idle probe", output: "no server".into() })));
}

/// What our observer's command prints: the history size it planned with, then the sizes, the
/// window, the tail and the screen, each after a separator line.
fn observation(planned: i64, history: i64, visible: &str) -> String {
    format!("{planned}\n{history} 2000 24\n{SEP}\n{SEP}\n{SEP}\n{visible}")
}

#[test]
fn the_first_observation_is_the_current_screen() {
    let mut state = state(false, Setup::Done(info()));
    let (reply, mut rx) = port();
    state.answer(Request::IncrementalOutput(reply), Ok(vec![out(0, &observation(0, 0, "root@box:/app# \n"))]));
    assert_eq!(rx.try_recv(), Ok(Ok("Current Terminal Screen:\nroot@box:/app#\n".to_string())));
}

#[test]
fn the_reference_observer_reads_its_own_capture_format() {
    let mut state = state(true, Setup::Done(info()));
    let (reply, mut rx) = port();
    let screen = "root@box:/app# \n";
    state.answer(Request::IncrementalOutput(reply), Ok(vec![out(0, &format!("{screen}{SEP}\n{screen}"))]));
    assert_eq!(rx.try_recv(), Ok(Ok(format!("Current Terminal Screen:\n{screen}"))));
}

#[test]
fn a_capture_that_lost_its_sections_is_garbled() {
    let mut state = state(false, Setup::Done(info()));
    let (reply, mut rx) = port();
    state.answer(Request::IncrementalOutput(reply), Ok(vec![out(0, "no separator here")]));
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Garbled)));
    let (reply, mut rx) = port();
    state.answer(Request::IncrementalOutput(reply), Ok(vec![out(1, "can't find pane\n")]));
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Command { what: "capture-pane", output: "can't find pane".into() })));
}

#[test]
fn an_observation_whose_window_the_pane_scrolled_past_is_queued_again_first_in_line() {
    let mut state = state(false, Setup::Done(info()));
    let (reply, mut first) = port();
    state.answer(Request::IncrementalOutput(reply), Ok(vec![out(0, &observation(100, 100, "a\nb\nc\n"))]));
    assert!(matches!(first.try_recv(), Ok(Ok(_))));
    // Another request waits behind the one being answered.
    let (waiting, _waiting_rx) = port();
    state.queue.push_back(Request::IsAlive(waiting));
    // 300 lines scrolled in after the window was planned: the anchor is above the window.
    let (reply, mut second) = port();
    state.answer(Request::IncrementalOutput(reply), Ok(vec![out(0, &observation(100, 400, "x\ny\nz\n"))]));
    assert_eq!(second.try_recv(), Err(TryRecvError::Empty), "not answered yet");
    assert_eq!(state.queue.len(), 2);
    assert!(matches!(state.queue.front(), Some(Request::IncrementalOutput(_))), "the reread goes first");
}

// --- the set-up: queue and waiters ---

#[test]
fn requests_wait_in_the_queue_while_the_set_up_runs() {
    let mut state = state(false, Setup::Running(Vec::new()));
    let (reply, mut rx) = port();
    state.accept(Request::CapturePane { entire: false, reply });
    state.accept(Request::IsAlive(port().0));
    assert_eq!(state.queue.len(), 2);
    assert!(matches!(state.queue.front(), Some(Request::CapturePane { .. })), "in the order they came");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn after_a_failed_set_up_a_request_is_answered_at_once_with_its_error() {
    let mut state = state(false, Setup::Failed(TmuxError::Start("no tmux server".into())));
    let (reply, mut rx) = port();
    state.accept(Request::CapturePane { entire: false, reply });
    assert!(state.queue.is_empty());
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::Start("no tmux server".into()))));
}

#[test]
fn ready_waits_for_a_running_set_up_and_answers_at_once_after_it() {
    let mut running = state(false, Setup::Running(Vec::new()));
    let (reply, mut rx) = port();
    running.ready(reply);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert!(matches!(&running.setup, Setup::Running(waiting) if waiting.len() == 1));

    let started = Instant::now();
    let mut done = state(false, Setup::Done(SessionInfo { recording_started: Some(started), started_uptime: None }));
    let (reply, mut rx) = port();
    done.ready(reply);
    assert_eq!(rx.try_recv(), Ok(Ok(SessionInfo { recording_started: Some(started), started_uptime: None })));

    let mut failed = state(false, Setup::Failed(TmuxError::NotInstalled));
    let (reply, mut rx) = port();
    failed.ready(reply);
    assert_eq!(rx.try_recv(), Ok(Err(TmuxError::NotInstalled)));
}

#[test]
fn a_finished_set_up_answers_everyone_waiting_and_keeps_the_queued_requests() {
    let mut state = state(false, Setup::Running(Vec::new()));
    let (first, mut first_rx) = port();
    let (second, mut second_rx) = port();
    state.ready(first);
    state.ready(second);
    state.accept(Request::IsAlive(port().0));
    state.set_up_over(Ok(info()));
    assert_eq!(first_rx.try_recv(), Ok(Ok(info())));
    assert_eq!(second_rx.try_recv(), Ok(Ok(info())));
    assert!(matches!(state.setup, Setup::Done(_)));
    assert_eq!(state.queue.len(), 1, "the request waits for the channel, not for an answer");
}

#[test]
fn a_failed_set_up_answers_everyone_waiting_and_every_queued_request_with_its_error() {
    let mut state = state(false, Setup::Running(Vec::new()));
    let (waiter, mut waiter_rx) = port();
    state.ready(waiter);
    let (capture, mut capture_rx) = port();
    state.accept(Request::CapturePane { entire: true, reply: capture });
    let (alive, mut alive_rx) = port();
    state.accept(Request::IsAlive(alive));
    state.set_up_over(Err(TmuxError::NotInstalled));
    assert_eq!(waiter_rx.try_recv(), Ok(Err(TmuxError::NotInstalled)));
    assert_eq!(capture_rx.try_recv(), Ok(Err(TmuxError::NotInstalled)));
    assert_eq!(alive_rx.try_recv(), Ok(false));
    assert!(state.queue.is_empty());
    assert!(matches!(&state.setup, Setup::Failed(TmuxError::NotInstalled)));
}
