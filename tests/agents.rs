//! Real agents (decisions.md D12): the agent images built by
//! `lazaret image build --agent NAME` (cached: built only when the tagged
//! image is missing or was built from another recipe), the real `claude`
//! and `codex` CLIs in a gVisor sandbox talking to a mock of the API each
//! speaks (Anthropic Messages; OpenAI Responses) by name, and escalating a
//! command to the host through /run/lazaret/escalate as the model asked.
//!
//! Like tests/dns.rs, the test makes its own network namespace with a test
//! host (here on 203.0.113.32/28, part of TEST-NET-3, so it never collides
//! with the dns tests' TEST-NET-2 host) running the upstream DNS server and
//! the mock.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::sandbox::Domain;
use common::testnet::{Spec, TestNet};
use common::{STANDARD_PATH, text};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};

const DNS: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 34);
const API: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 35);
const API_NAME: &str = "api.lazaret.test";
/// A name the CLI is pointed at in the second run; never allowed.
const DENIED_NAME: &str = "denied.lazaret.test";
const TOOL_ID: &str = "toolu_lazaret_escalate_1";
const FINAL_TEXT: &str = "LAZARET-MOCK-FINAL: the host user is known";
/// The command the mock's tool call runs (auto-approved by the test config).
const HOST_COMMAND: &str = "/run/lazaret/escalate --justify 'which user runs the host' -- id -un";
/// A line of assets/agents/instructions.md: the agent got the guide.
const GUIDE_LINE: &str = "You are running inside a Lazaret sandbox";

/// The upstream: answers only the API's name.
fn zone(name: &str, qtype: RecordType) -> Vec<Record> {
    if name == format!("{API_NAME}.") && qtype == RecordType::A {
        return vec![Record::from_rdata(
            Name::from_ascii(name).unwrap(),
            5,
            RData::A(A(API)),
        )];
    }
    Vec::new()
}

/// One HTTP request the mock got.
struct Request {
    line: String,
    body: String,
}

/// What the mock saw: every request line, the tool result it got, and
/// whether a request carried the guide.
#[derive(Default)]
struct Seen {
    requests: Vec<String>,
    tool_result: Option<String>,
    guide: bool,
}

/// A mock API: the answer to a request (a server-sent event stream), or
/// `None` for a 404.
type Answer = fn(&Request, &Mutex<Seen>) -> Option<String>;

/// The test host with the mock API on port 80 of [`API`].
fn start_mock(answer: Answer) -> (TestNet, Arc<Mutex<Seen>>) {
    let tn = TestNet::start(&Spec {
        tag: "lza",
        host: &["203.0.113.33/28"],
        inside: vec![IpAddr::V4(DNS), IpAddr::V4(API)],
        dns: DNS,
        zone,
    });
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let listener = tn.listen(SocketAddr::from((API, 80)));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let seen = s2.clone();
            std::thread::spawn(move || serve_api(s, &seen, answer));
        }
    });
    (tn, seen)
}

/// One HTTP/1.1 exchange per connection (the reply closes it).
fn serve_api(mut s: TcpStream, seen: &Mutex<Seen>, answer: Answer) {
    let Some(req) = read_request(&s) else {
        return;
    };
    {
        let mut seen = seen.lock().unwrap();
        seen.requests.push(req.line.clone());
        seen.guide |= req.body.contains(GUIDE_LINE);
    }
    let Some(events) = answer(&req, seen) else {
        let _ = s.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
        );
        return;
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nrequest-id: req_lazaret\r\nx-request-id: req_lazaret\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        events.len()
    );
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(events.as_bytes());
}

fn read_request(s: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body).ok()?;
    }
    Some(Request {
        line: line.trim().to_string(),
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

fn event(name: &str, data: &serde_json::Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// The Anthropic Messages API, as Claude Code streams it.
mod messages {
    use super::*;

    pub fn answer(req: &Request, seen: &Mutex<Seen>) -> Option<String> {
        if !req.line.starts_with("POST /v1/messages") || req.line.contains("count_tokens") {
            return None;
        }
        Some(if req.body.contains(TOOL_ID) {
            seen.lock().unwrap().tool_result = Some(req.body.clone());
            text(FINAL_TEXT)
        } else if req.body.contains("LAZARET-PROMPT") && req.body.contains("\"Bash\"") {
            tool_use(HOST_COMMAND)
        } else {
            // Side requests (titles, summaries): a plain short answer.
            text("ok")
        })
    }

    fn message_start() -> String {
        event(
            "message_start",
            &serde_json::json!({"type": "message_start", "message": {
                "id": "msg_lazaret", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5", "content": [], "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        )
    }

    fn message_end(stop_reason: &str) -> String {
        event(
            "message_delta",
            &serde_json::json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": 12}}),
        ) + &event("message_stop", &serde_json::json!({"type": "message_stop"}))
    }

    fn block(index: u32, start: &serde_json::Value, delta: &serde_json::Value) -> String {
        event(
            "content_block_start",
            &serde_json::json!({"type": "content_block_start", "index": index,
                "content_block": start}),
        ) + &event(
            "content_block_delta",
            &serde_json::json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ) + &event(
            "content_block_stop",
            &serde_json::json!({"type": "content_block_stop", "index": index}),
        )
    }

    fn text(t: &str) -> String {
        message_start()
            + &block(
                0,
                &serde_json::json!({"type": "text", "text": ""}),
                &serde_json::json!({"type": "text_delta", "text": t}),
            )
            + &message_end("end_turn")
    }

    fn tool_use(command: &str) -> String {
        let input = serde_json::json!({"command": command, "description": "Ask the host"});
        message_start()
            + &block(
                0,
                &serde_json::json!({"type": "tool_use", "id": TOOL_ID, "name": "Bash", "input": {}}),
                &serde_json::json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            )
            + &message_end("tool_use")
    }
}

/// The OpenAI Responses API, as Codex streams it (`POST /v1/responses`,
/// server-sent events; the tool result comes back as a
/// `function_call_output` item of the next request's input).
mod responses {
    use super::*;

    pub fn answer(req: &Request, seen: &Mutex<Seen>) -> Option<String> {
        if !req.line.starts_with("POST /v1/responses") {
            return None;
        }
        let body: serde_json::Value = serde_json::from_str(&req.body).ok()?;
        let input = body["input"].as_array().cloned().unwrap_or_default();
        if let Some(out) = input
            .iter()
            .find(|i| i["type"] == "function_call_output" && i["call_id"] == TOOL_ID)
        {
            seen.lock().unwrap().tool_result = Some(out["output"].to_string());
            return Some(reply(&message(FINAL_TEXT)));
        }
        if !req.body.contains("LAZARET-PROMPT") {
            return Some(reply(&message("ok")));
        }
        // The shell tool differs between Codex versions and model families:
        // call the one this request offers.
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        let (name, args) = if tools.contains(&"exec_command") {
            ("exec_command", serde_json::json!({"cmd": HOST_COMMAND}))
        } else if tools.contains(&"shell_command") {
            (
                "shell_command",
                serde_json::json!({"command": HOST_COMMAND}),
            )
        } else {
            (
                "shell",
                serde_json::json!({"command": ["bash", "-lc", HOST_COMMAND]}),
            )
        };
        Some(reply(&serde_json::json!({
            "type": "function_call", "id": "fc_lazaret", "call_id": TOOL_ID,
            "name": name, "arguments": args.to_string()})))
    }

    fn message(t: &str) -> serde_json::Value {
        serde_json::json!({"type": "message", "role": "assistant", "id": "msg_lazaret",
            "content": [{"type": "output_text", "text": t, "annotations": []}]})
    }

    fn reply(item: &serde_json::Value) -> String {
        event(
            "response.created",
            &serde_json::json!({"type": "response.created", "response": {"id": "resp_lazaret"}}),
        ) + &event(
            "response.output_item.added",
            &serde_json::json!({"type": "response.output_item.added", "output_index": 0,
                "item": item}),
        ) + &event(
            "response.output_item.done",
            &serde_json::json!({"type": "response.output_item.done", "output_index": 0,
                "item": item}),
        ) + &event(
            "response.completed",
            &serde_json::json!({"type": "response.completed", "response": {
                "id": "resp_lazaret",
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}}),
        )
    }
}

/// The agent's image for the test user, built once and then reused while
/// its recipe is the same (the build labels the image with the recipe's
/// digest).
fn agent_image(d: &Domain, agent: &str) {
    let image = format!("localhost/lazaret/agent-{agent}:latest");
    let recipe = lazaret::agents::agent_recipe_digest(agent).unwrap();
    let out = common::podman(&[
        "image",
        "inspect",
        "--format",
        "{{index .Labels \"lazaret.recipe\"}}",
        &image,
    ]);
    if out.status.success() && text(&out).0.trim() == recipe {
        return;
    }
    let started = Instant::now();
    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "build", "--agent", agent])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "image build failed:\n{o}{e}");
    eprintln!("built the {agent} image in {:?}:\n{o}", started.elapsed());
}

/// A `lazaret exec PROFILE -- sleep` session, ended (SIGTERM, which ends
/// `lazaret exec` cleanly) when dropped.
struct Holder(std::process::Child);

impl Holder {
    fn start(d: &Domain, profile: &str) -> Holder {
        let mut child = d
            .cmd_raw(STANDARD_PATH, &["exec", profile, "--", "sleep", "1800"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut progress = BufReader::new(child.stderr.take().unwrap());
        // Ended on drop, also if it never gets ready.
        let holder = Holder(child);
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if progress.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("the holding session ended before the domain was ready:\n{seen}");
            }
            seen.push_str(&line);
            if line.contains("] ready") {
                break;
            }
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut progress, &mut std::io::sink()));
        holder
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

/// What one run of an agent CLI in its sandbox left behind.
struct Run {
    /// First, so the session ends before the domain is torn down.
    _holder: Holder,
    d: Domain,
    tn: TestNet,
    seen: Arc<Mutex<Seen>>,
    output: String,
}

/// Starts the agent's profile (`agent = AGENT`, allowed to reach only the
/// mock's name, with `env`) against the mock `answer`, and runs `script`
/// in its sandbox (`{url}` in it is the mock's base URL).
fn run_agent(agent: &'static str, env: &str, answer: Answer, script: &str) -> Run {
    let started = Instant::now();
    let d = Domain::new(agent);
    agent_image(&d, agent);
    eprintln!("image ready at {:?}", started.elapsed());
    let (tn, seen) = start_mock(answer);
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    d.s.write(
        "config.toml",
        &config.replacen(
            "default_deny = []\n",
            &format!("default_deny = []\ndns_upstream = \"{DNS}:53\"\n"),
            1,
        ),
    );
    d.add_config(&format!(
        "[profiles.{agent}]\nagent = \"{agent}\"\nallow_domains = [\"{API_NAME}\"]\nenv = {{ {env} }}\n"
    ));
    // A session held open until the test ends keeps the domain up after
    // the run (the last session to leave tears it down): the refused-name
    // list is read from its sidecar afterwards.
    let holder = Holder::start(&d, agent);
    let script = script.replace("{url}", &format!("http://{API_NAME}"));
    let out = d
        .cmd_raw(STANDARD_PATH, &["exec", agent, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    eprintln!("{agent} ran at {:?}:\n{o}{e}", started.elapsed());
    Run {
        _holder: holder,
        d,
        tn,
        seen,
        output: format!("{o}{e}"),
    }
}

/// The checks both agents share: the tool result held the host's output,
/// the CLI printed the mock's final text, the request carried the guide,
/// only the allowed name left the sandbox, and the audit chain holds the
/// escalation.
fn assert_escalated(run: &Run) {
    let host_user = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    let o = &run.output;
    let seen = run.seen.lock().unwrap();
    eprintln!(
        "requests: {:?}\nnames asked upstream: {:?}",
        seen.requests,
        run.tn.names_asked()
    );
    let result = seen
        .tool_result
        .clone()
        .unwrap_or_else(|| panic!("the CLI never sent the tool result:\n{o}"));
    assert!(
        result.contains(&host_user),
        "the tool result lacks the host's output `{host_user}`: {result}"
    );
    assert!(
        o.contains(FINAL_TEXT),
        "the CLI did not print the final text:\n{o}"
    );
    assert!(o.contains("EXIT=0"), "{o}");
    assert!(seen.guide, "no request carried the in-sandbox guide");
    drop(seen);
    assert_eq!(
        run.tn.names_asked(),
        vec![format!("{API_NAME}.")],
        "a name not allowed reached the upstream"
    );
    let records = run.d.audit_json();
    let asked = records
        .iter()
        .find(|r| r["kind"] == "escalation-decision")
        .unwrap_or_else(|| panic!("no escalation in the audit log: {records:?}"));
    assert_eq!(asked["data"]["decision"], "auto-approved", "{asked}");
    assert!(
        records.iter().any(|r| r["kind"] == "escalation-result"),
        "{records:?}"
    );
}

/// The names the sidecar refused, from `lazaret net show`.
fn refused_names(d: &Domain) -> Vec<String> {
    let out = d.cmd(STANDARD_PATH, &["net", "show"]).output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    o.lines()
        .skip_while(|l| !l.starts_with("refused names"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Names the CLI tries that are not allowed are refused inside, never reach
/// the upstream, and show up in the refused-name list: what the CLI tried
/// on its own in the first run, and the name it is pointed at in `script`.
fn assert_refused(run: &Run, script: &str) {
    let before = refused_names(&run.d);
    eprintln!("refused after the run: {before:?}");
    assert!(!before.contains(&API_NAME.to_string()), "{before:?}");
    let script = script.replace("{url}", &format!("http://{DENIED_NAME}"));
    let out = run
        .d
        .cmd_raw(
            STANDARD_PATH,
            &["exec", run.d.profile, "--", "sh", "-c", &script],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(
        !o.contains("EXIT=0"),
        "the CLI reached a denied name:\n{o}{e}"
    );
    let refused = refused_names(&run.d);
    assert!(
        refused.contains(&DENIED_NAME.to_string()),
        "{DENIED_NAME} not in the refused names {refused:?}:\n{o}{e}"
    );
    assert_eq!(
        run.tn.asked(DENIED_NAME),
        0,
        "a refused name left the sandbox"
    );
    assert_eq!(run.tn.names_asked(), vec![format!("{API_NAME}.")]);
}

#[test]
fn claude_code_escalates_through_a_mock_api() {
    if !common::can_run_as_root("making the test's network namespace needs root") {
        return;
    }
    let claude = |url_var: &str, timeout: u32| {
        format!(
            "cd /workspace && ANTHROPIC_BASE_URL={url_var} timeout {timeout} \
             claude -p 'LAZARET-PROMPT: which user runs the host?' \
             --dangerously-skip-permissions 2>&1; echo EXIT=$?"
        )
    };
    let run = run_agent(
        "claude",
        "ANTHROPIC_API_KEY = \"sk-ant-lazaret-test\"",
        messages::answer,
        &claude("{url}", 240),
    );
    assert_escalated(&run);
    assert_refused(&run, &claude("{url}", 30));
}

#[test]
fn codex_exec_escalates_through_a_mock_api() {
    if !common::can_run_as_root("making the test's network namespace needs root") {
        return;
    }
    // The mock as a model provider of its own: Codex's built-in `openai`
    // provider tries a WebSocket transport first and ignores
    // OPENAI_BASE_URL. No retries, so the denied run fails at once.
    let codex = |timeout: u32| {
        format!(
            "cd /workspace && timeout {timeout} codex exec --skip-git-repo-check \
             --dangerously-bypass-approvals-and-sandbox \
             -c model_provider=lazaret -c model=gpt-5-codex \
             -c 'model_providers.lazaret={{name=\"Lazaret mock\",base_url=\"{{url}}/v1\",\
             env_key=\"OPENAI_API_KEY\",wire_api=\"responses\",supports_websockets=false,\
             request_max_retries=0,stream_max_retries=0}}' \
             'LAZARET-PROMPT: which user runs the host?' 2>&1; echo EXIT=$?"
        )
    };
    let run = run_agent(
        "codex",
        "OPENAI_API_KEY = \"sk-lazaret-test\"",
        responses::answer,
        &codex(240),
    );
    assert_escalated(&run);
    assert_refused(&run, &codex(30));
}

/// A tab whose command does not exist shows why, and the UI stays usable:
/// another tab opens and runs a shell; closing both ends the UI.
#[test]
fn a_missing_agent_command_shows_why_in_its_tab() {
    let d = Domain::new("gv");
    d.add_config(&format!(
        "[profiles.noagent]\nimage = \"{}\"\ncommand = \"no-such-agent-cli --flag\"\n",
        common::sandbox::BASE_IMAGE
    ));
    let other = d.other("noagent");
    let t = d.tmux(120, 35, "ui --profile noagent", None);
    let s = t.wait_for(120, "the failure in the tab", |s| {
        s.contains("command not found") && s.contains("exit code 127")
    });
    assert!(s.contains("no-such-agent-cli"), "{s}");
    assert!(t.alive(), "the UI vanished:\n{s}");
    // Still usable: a new tab on the workbench profile runs a shell.
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("New tab"));
    for _ in 0..8 {
        t.send(&["Up"]);
    }
    t.wait_for(20, "the first profile picked", |s| s.contains("› gv"));
    t.send(&["Enter"]);
    let s = t.wait_for(120, "a second tab's shell", |s| s.contains("root@"));
    t.line("clear; echo STILL-$((6*7))");
    t.wait_for(20, "the shell's output", |s| s.contains("STILL-42"));
    drop(s);
    // The shell's session runs: closing its tab asks, y answers; the
    // failed tab closes at once.
    t.send(&["C-a", "x"]);
    t.wait_for(20, "the question", |s| s.contains("its session ends"));
    t.send(&["y"]);
    t.send(&["C-a", "1"]);
    t.send(&["C-a", "x"]);
    t.wait_exit(30, "lazaret ui after both tabs closed");
    common::sandbox::wait_domain_gone(&other, Vec::new);
}

/// Starting a profile whose agent image is not built says the exact
/// command that builds it, and starts nothing.
#[test]
fn a_missing_agent_image_says_how_to_build_it() {
    let d = Domain::new("aider");
    // A tag of the aider repository that this test owns and nothing builds,
    // so the test runs whether or not this machine has built aider.
    let image = format!(
        "localhost/lazaret/agent-aider:lazaret-test-missing-{}",
        d.hash
    );
    assert!(
        !common::podman(&["image", "exists", &image])
            .status
            .success(),
        "{image} exists"
    );
    d.add_config(&format!(
        "[profiles.aider]\nagent = \"aider\"\nimage = \"{image}\"\n"
    ));
    let out = d.lazaret(&["sandbox", "up"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert!(
        e.contains("lazaret image build --agent aider"),
        "no build command in:\n{o}{e}"
    );
    assert!(d.containers().is_empty(), "{:?}", d.containers());
}

/// Logging in (issue 16): an agent keeps its login in its profile's home
/// volume (`{profile_dir}/home`, as the example's agent profiles mount it
/// over `/root`), so a login made in one workspace's domain is there in
/// another workspace's domain of the same profile.
#[test]
fn login_state_persists_in_the_profile_home_across_domains() {
    let d = Domain::new("gv");
    let other = d.s.mkdir("ws2");
    let second = lazaret::domain::DomainAnchor::new("gv", &other).unwrap();
    assert_ne!(second.hash(), d.hash, "two workspaces, two domains");
    let exec = |ws: &std::path::Path, script: &str| {
        let out = d
            .cmd_raw(
                STANDARD_PATH,
                &[
                    "exec",
                    "gv",
                    "-w",
                    ws.to_str().unwrap(),
                    "--",
                    "sh",
                    "-c",
                    script,
                ],
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (o, e) = text(&out);
        assert!(out.status.success(), "{script}: {o}{e}");
        o
    };
    exec(
        &d.ws(),
        "mkdir -p /root/persist/.claude && echo login-token-7 > /root/persist/.claude/.credentials.json",
    );
    d.wait_until_gone();
    let read = exec(&other, "cat /root/persist/.claude/.credentials.json");
    assert_eq!(read.trim(), "login-token-7");
    common::sandbox::wait_domain_gone(&second, Vec::new);
}
