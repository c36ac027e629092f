//! Real agents (decisions.md D12): the Claude Code image built by
//! `lazaret image build --agent claude` (cached: built only when the tagged
//! image is missing), the real `claude` CLI in a gVisor sandbox talking to a
//! mock of the Anthropic Messages API by name, and escalating a command to
//! the host through /run/lazaret/escalate as the model asked.
//!
//! Like tests/dns.rs, the test makes its own network namespace with a test
//! host (here on TEST-NET-3, 203.0.113.0/24, so it never collides with the
//! dns tests' TEST-NET-2 host) running the upstream DNS server and the mock.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::sandbox::Domain;
use common::{STANDARD_PATH, text};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};

const DNS: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
const API: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 3);
const API_NAME: &str = "api.lazaret.test";
const CLAUDE_IMAGE: &str = "localhost/lazaret/agent-claude:latest";
const TOOL_ID: &str = "toolu_lazaret_escalate_1";
const FINAL_TEXT: &str = "LAZARET-MOCK-FINAL: the host user is known";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {}", text(&out).1);
}

/// What the mock saw: every request line, and the tool result it got.
#[derive(Default)]
struct Seen {
    requests: Vec<String>,
    tool_result: Option<String>,
    queries: Vec<String>,
}

struct TestNet {
    ns: String,
    seen: Arc<Mutex<Seen>>,
}

impl Drop for TestNet {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

impl TestNet {
    fn start(host_command: &str) -> TestNet {
        let id = std::process::id() % 100_000;
        let ns = format!("lzag{id}");
        let (host_if, ns_if) = (format!("lza{id}h"), format!("lza{id}n"));
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        ip(&["netns", "add", &ns]);
        let net = TestNet {
            ns: ns.clone(),
            seen: Arc::default(),
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &ns,
        ]);
        ip(&["addr", "add", "203.0.113.1/24", "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        for a in [DNS, API] {
            ip(&["-n", &ns, "addr", "add", &format!("{a}/24"), "dev", &ns_if]);
        }
        ip(&["-n", &ns, "link", "set", &ns_if, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let out = Command::new("ip")
            .args(["route", "get", &API.to_string()])
            .output()
            .unwrap();
        assert!(
            text(&out).0.contains(&format!("dev {host_if}")),
            "{API} is not routed into the test namespace: {}",
            text(&out).0
        );
        let (udp, tcp) = std::thread::spawn(move || {
            let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
            nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            (
                UdpSocket::bind(SocketAddr::from((DNS, 53))).unwrap(),
                TcpListener::bind(SocketAddr::from((API, 80))).unwrap(),
            )
        })
        .join()
        .unwrap();
        let seen = net.seen.clone();
        std::thread::spawn(move || serve_dns(&udp, &seen));
        let seen = net.seen.clone();
        let cmd = host_command.to_string();
        std::thread::spawn(move || {
            for s in tcp.incoming().flatten() {
                let (seen, cmd) = (seen.clone(), cmd.clone());
                std::thread::spawn(move || serve_api(s, &seen, &cmd));
            }
        });
        net
    }
}

/// The upstream: answers only the API's name; records every question.
fn serve_dns(udp: &UdpSocket, seen: &Mutex<Seen>) {
    let mut buf = [0u8; 2048];
    while let Ok((n, peer)) = udp.recv_from(&mut buf) {
        let Ok(q) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        let Some(query) = q.queries.first().cloned() else {
            continue;
        };
        let name = query.name().to_ascii().to_ascii_lowercase();
        seen.lock().unwrap().queries.push(name.clone());
        let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
        r.metadata.recursion_desired = q.metadata.recursion_desired;
        r.metadata.recursion_available = true;
        r.metadata.response_code = ResponseCode::NoError;
        r.queries = q.queries.clone();
        if name == format!("{API_NAME}.") && query.query_type() == RecordType::A {
            r.answers = vec![Record::from_rdata(
                Name::from_ascii(&name).unwrap(),
                5,
                RData::A(A(API)),
            )];
        }
        let _ = udp.send_to(&r.to_vec().unwrap(), peer);
    }
}

/// One HTTP/1.1 exchange per connection (the reply closes it).
fn serve_api(mut s: TcpStream, seen: &Mutex<Seen>, host_command: &str) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let request_line = line.trim().to_string();
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
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body).unwrap();
    }
    let body = String::from_utf8_lossy(&body).to_string();
    seen.lock().unwrap().requests.push(request_line.clone());
    if !request_line.starts_with("POST /v1/messages") || request_line.contains("count_tokens") {
        let _ = s.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
        );
        return;
    }
    let events = if body.contains(TOOL_ID) {
        seen.lock().unwrap().tool_result = Some(body);
        sse_text(FINAL_TEXT)
    } else if body.contains("LAZARET-PROMPT") && body.contains("\"Bash\"") {
        sse_tool_use(host_command)
    } else {
        // Side requests (titles, summaries): a plain short answer.
        sse_text("ok")
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nrequest-id: req_lazaret\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        events.len()
    );
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(events.as_bytes());
}

fn event(name: &str, data: &serde_json::Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
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

fn sse_text(t: &str) -> String {
    message_start()
        + &event(
            "content_block_start",
            &serde_json::json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        )
        + &event(
            "content_block_delta",
            &serde_json::json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": t}}),
        )
        + &event(
            "content_block_stop",
            &serde_json::json!({"type": "content_block_stop", "index": 0}),
        )
        + &message_end("end_turn")
}

fn sse_tool_use(command: &str) -> String {
    let input = serde_json::json!({"command": command, "description": "Ask the host"});
    message_start()
        + &event(
            "content_block_start",
            &serde_json::json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": TOOL_ID, "name": "Bash", "input": {}}}),
        )
        + &event(
            "content_block_delta",
            &serde_json::json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        )
        + &event(
            "content_block_stop",
            &serde_json::json!({"type": "content_block_stop", "index": 0}),
        )
        + &message_end("tool_use")
}

/// The Claude Code image for the test user, built once and then reused.
fn claude_image(d: &Domain) {
    if common::podman(&["image", "exists", CLAUDE_IMAGE])
        .status
        .success()
    {
        return;
    }
    let started = Instant::now();
    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "build", "--agent", "claude"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "image build failed:\n{o}{e}");
    eprintln!("built the claude image in {:?}:\n{o}", started.elapsed());
}

#[test]
fn claude_code_escalates_through_a_mock_api() {
    if !common::is_root() {
        eprintln!("skipped: making the test's network namespace needs root");
        return;
    }
    let started = Instant::now();
    let d = Domain::new("claude");
    claude_image(&d);
    eprintln!("image ready at {:?}", started.elapsed());
    let host_user = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    let tn = TestNet::start("/run/lazaret/escalate --justify 'which user runs the host' -- id -un");
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
        "[profiles.claude]\nagent = \"claude\"\nallow_domains = [\"{API_NAME}\"]\n\
         env = {{ ANTHROPIC_BASE_URL = \"http://{API_NAME}\", ANTHROPIC_API_KEY = \"sk-ant-lazaret-test\" }}\n"
    ));
    let out = d
        .cmd_raw(
            STANDARD_PATH,
            &[
                "exec",
                "claude",
                "--",
                "sh",
                "-c",
                "cd /workspace && timeout 240 claude -p 'LAZARET-PROMPT: which user runs the host?' \
                 --dangerously-skip-permissions 2>&1; echo EXIT=$?",
            ],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    eprintln!("claude ran at {:?}:\n{o}{e}", started.elapsed());
    let seen = tn.seen.lock().unwrap();
    eprintln!("requests: {:?}\nqueries: {:?}", seen.requests, seen.queries);
    let result = seen
        .tool_result
        .clone()
        .unwrap_or_else(|| panic!("the CLI never sent the tool result:\n{o}{e}"));
    assert!(
        result.contains(&host_user),
        "the tool result lacks the host's output `{host_user}`: {result}"
    );
    assert!(
        o.contains(FINAL_TEXT),
        "the CLI did not print the final text:\n{o}{e}"
    );
    assert!(o.contains("EXIT=0"), "{o}{e}");
    // Only the allowed name ever left the sandbox.
    for q in &seen.queries {
        assert_eq!(
            q,
            &format!("{API_NAME}."),
            "a name not allowed reached the upstream"
        );
    }
    drop(seen);
    // The audit chain holds the escalation, auto-approved, and its result.
    let records = d.audit_json();
    let asked = records
        .iter()
        .find(|r| r["kind"] == "escalation-decision")
        .unwrap_or_else(|| panic!("no escalation in the audit log: {records:?}"));
    assert_eq!(asked["data"]["decision"], "auto-approved", "{asked}");
    assert!(
        records.iter().any(|r| r["kind"] == "escalation-result"),
        "{records:?}"
    );
    eprintln!("done at {:?}", started.elapsed());
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
    t.send(&["C-a", "x"]);
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
    if common::podman(&["image", "exists", "localhost/lazaret/agent-aider:latest"])
        .status
        .success()
    {
        eprintln!("skipped: the aider image is built on this machine");
        return;
    }
    d.add_config("[profiles.aider]\nagent = \"aider\"\n");
    let out = d.lazaret(&["sandbox", "up"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert!(
        e.contains("lazaret image build --agent aider"),
        "no build command in:\n{o}{e}"
    );
    assert!(d.containers().is_empty(), "{:?}", d.containers());
}
