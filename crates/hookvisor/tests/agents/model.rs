//! A scripted model server on 127.0.0.1: it speaks the three APIs the clients call (Anthropic
//! Messages with SSE, OpenAI Responses with SSE, Gemini `streamGenerateContent`/
//! `generateContent`), answers from a script instead of a model, and logs every request.
//!
//! The script is the same for every API. A request whose last input is
//! - the task prompt (it holds [`TASK`]): run a shell command that writes a bad `notes.txt`;
//! - our re-prompt (it holds `[Discobot Hook Failed]`): run a command that writes `notes.txt`
//!   again, fixed or still bad as the [`Script`] says;
//! - a tool's result: say "done" and end the turn;
//! - anything else (a title, a summary, a request without tools): say "ok".

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{Value, json};

/// The marker of the task prompt the tests give the clients.
pub const TASK: &str = "HOOKVISOR-TASK";
/// The marker of the task a subagent gets ([`Script::Subagent`]).
pub const SUBTASK: &str = "HOOKVISOR-SUBTASK";
/// What marks our re-prompt.
pub const REPROMPT: &str = "[Discobot Hook Failed]";

/// How the scripted model answers a re-prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// Write a good `notes.txt`.
    FixesAtOnce,
    /// Write another bad `notes.txt`, every time.
    NeverFixes,
    /// Hand the task to a subagent (Claude Code's Agent tool), which writes a bad
    /// `notes.txt` and fixes it when re-prompted.
    Subagent,
    /// Run `cd src && pwd`, then Write `Cargo.lock` in the directory that printed (Anthropic's
    /// Write tool only): the client then sends `src` as every later event's `cwd`.
    CdThenWrite,
    /// Read `secret-a.txt` and `secret-b.txt` of the working directory in one reply: two
    /// `Read` calls, which Claude Code runs at once (Anthropic only).
    TwoReads,
}

/// What the script decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Call the client's shell tool with this command.
    Shell(String),
    /// Say this and end the turn.
    Say(&'static str),
    /// Start a subagent with this prompt (Anthropic's Agent tool only).
    Subagent(String),
    /// Write this absolute path (Anthropic's Write tool only).
    Write(String),
    /// Read these absolute paths, all in one reply (Anthropic's Read tool only).
    Reads(Vec<String>),
}

/// One logged request.
#[derive(Debug, Clone)]
pub struct Logged {
    pub path: String,
    pub body: Value,
    /// The reply, when the request was a model call.
    pub reply: Option<Reply>,
    /// The last input the script read.
    pub last: Last,
}

/// The last input of a conversation, as the script reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Last {
    /// A tool's result.
    ToolResult,
    /// A user (or hook) message: its text.
    Text(String),
    /// Not a model call, or nothing to read.
    None,
}

impl Logged {
    /// The attempt our re-prompt carried ("2/3"), when the last input was one.
    pub fn attempt(&self) -> Option<String> {
        let Last::Text(text) = &self.last else {
            return None;
        };
        if !text.contains(REPROMPT) {
            return None;
        }
        let start = text.rfind("(Attempt ")? + "(Attempt ".len();
        let end = start + text[start..].find(')')?;
        Some(text[start..end].to_owned())
    }

    /// Whether this request belongs to the task's conversation (not a side request).
    pub fn in_task(&self) -> bool {
        self.in_conversation(TASK)
    }

    /// Whether this request belongs to the conversation whose prompt holds `marker`.
    pub fn in_conversation(&self, marker: &str) -> bool {
        self.body.to_string().contains(marker)
            && matches!(
                self.reply,
                Some(
                    Reply::Shell(_)
                        | Reply::Subagent(_)
                        | Reply::Write(_)
                        | Reply::Reads(_)
                        | Reply::Say("done")
                )
            )
    }
}

/// The server; stops accepting when dropped (its threads end with their connections).
pub struct ModelServer {
    pub url: String,
    log: Arc<Mutex<Vec<Logged>>>,
}

impl ModelServer {
    /// Starts on an ephemeral loopback port.
    pub fn start(script: Script) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&log);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = Arc::clone(&shared);
                thread::spawn(move || serve(stream, script, &log));
            }
        });
        ModelServer { url, log }
    }

    /// Every request so far, in arrival order.
    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }

    /// The requests of the task's conversation.
    pub fn task(&self) -> Vec<Logged> {
        self.log().into_iter().filter(Logged::in_task).collect()
    }

    /// The attempts of the re-prompts that reached the model, in order.
    pub fn attempts(&self) -> Vec<String> {
        self.task().iter().filter_map(Logged::attempt).collect()
    }

    /// A readable summary of the log, for failure messages.
    pub fn summary(&self) -> String {
        self.log()
            .iter()
            .map(|l| {
                let last = match &l.last {
                    Last::Text(t) => format!("text {:?}", t.chars().take(120).collect::<String>()),
                    other => format!("{other:?}"),
                };
                format!("{} last={last} reply={:?}", l.path, l.reply)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The shell command that writes `notes.txt` for this conversation step.
fn write_notes(content: &str) -> String {
    format!("printf '%s\\n' '{content}' > notes.txt")
}

/// The script (module docs).
fn decide(script: Script, last: &Last, has_tools: bool) -> Reply {
    match last {
        _ if !has_tools => Reply::Say("ok"),
        Last::ToolResult => Reply::Say("done"),
        Last::Text(text) if text.contains(REPROMPT) => {
            let attempt = text
                .rfind("(Attempt ")
                .map(|at| {
                    text[at + 9..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect()
                })
                .unwrap_or_else(|| "?".to_owned());
            Reply::Shell(write_notes(&match script {
                Script::FixesAtOnce | Script::Subagent | Script::CdThenWrite | Script::TwoReads => {
                    "good notes".to_owned()
                }
                Script::NeverFixes => format!("bad notes {attempt}"),
            }))
        }
        Last::Text(text) if text.contains(SUBTASK) => Reply::Shell(write_notes("bad notes 0")),
        Last::Text(text) if text.contains(TASK) && script == Script::Subagent => {
            Reply::Subagent(format!("{SUBTASK}: write notes.txt"))
        }
        Last::Text(text) if text.contains(TASK) && script == Script::CdThenWrite => {
            Reply::Shell("cd src && pwd".to_owned())
        }
        Last::Text(text) if text.contains(TASK) => Reply::Shell(write_notes("bad notes 0")),
        _ => Reply::Say("ok"),
    }
}

/// A fresh id with `prefix`: clients tell messages and tool calls apart by their ids.
fn unique(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}_{n:024}")
}

/// A parsed HTTP request.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

fn read_request(stream: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    stream.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let mut body = Vec::new();
    if let Some(len) = headers.get("content-length") {
        body.resize(len.parse().ok()?, 0);
        stream.read_exact(&mut body).ok()?;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    Some(Request { method, path, body })
}

fn serve(stream: TcpStream, script: Script, log: &Mutex<Vec<Logged>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut stream = stream;
    while let Some(request) = read_request(&mut reader) {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        if let Some(dir) = std::env::var_os("HOOKVISOR_MODEL_DUMP") {
            let n = log.lock().unwrap().len();
            let _ = std::fs::write(
                std::path::Path::new(&dir).join(format!("{n:03}.json")),
                serde_json::to_vec_pretty(&json!({"path": request.path, "body": body})).unwrap(),
            );
        }
        let (status, content_type, payload, reply, last) = respond(script, &request, &body);
        log.lock().unwrap().push(Logged {
            path: format!("{} {}", request.method, request.path),
            body,
            reply,
            last,
        });
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
             connection: keep-alive\r\n\r\n",
            payload.len()
        );
        if stream.write_all(head.as_bytes()).is_err()
            || stream.write_all(payload.as_bytes()).is_err()
            || stream.flush().is_err()
        {
            return;
        }
    }
}

type Response = (&'static str, &'static str, String, Option<Reply>, Last);

fn respond(script: Script, request: &Request, body: &Value) -> Response {
    let path = request.path.split('?').next().unwrap_or("");
    if request.method == "POST" && path.ends_with("/v1/messages") {
        let (last, tools) = anthropic::last(body);
        let reply = match anthropic::printed_src(body) {
            // `cd src && pwd` printed where the shell now is: write there.
            Some(dir) if script == Script::CdThenWrite && last == Last::ToolResult => {
                Reply::Write(format!("{dir}/Cargo.lock"))
            }
            _ if script == Script::TwoReads
                && tools
                && matches!(&last, Last::Text(t) if t.contains(TASK)) =>
            {
                match anthropic::working_dir(body) {
                    Some(dir) => Reply::Reads(
                        ["secret-a.txt", "secret-b.txt"]
                            .iter()
                            .map(|f| format!("{dir}/{f}"))
                            .collect(),
                    ),
                    None => Reply::Say("no working directory in the prompt"),
                }
            }
            _ => decide(script, &last, tools),
        };
        let payload = if body["stream"] == true {
            anthropic::stream(&reply)
        } else {
            anthropic::message(&reply).to_string()
        };
        let kind = if body["stream"] == true {
            "text/event-stream"
        } else {
            "application/json"
        };
        return ("200 OK", kind, payload, Some(reply), last);
    }
    if request.method == "POST" && path.ends_with("/responses") {
        let (last, tools) = openai::last(body);
        let reply = decide(script, &last, !tools.is_empty());
        let payload = openai::stream(&reply, &tools);
        return ("200 OK", "text/event-stream", payload, Some(reply), last);
    }
    if request.method == "POST" && path.contains(":streamGenerateContent") {
        let (last, tools) = gemini::last(body);
        let reply = decide(script, &last, tools);
        let payload = format!("data: {}\r\n\r\n", gemini::response(&reply));
        return ("200 OK", "text/event-stream", payload, Some(reply), last);
    }
    if request.method == "POST" && path.contains(":generateContent") {
        let (last, tools) = gemini::last(body);
        let reply = decide(script, &last, tools);
        let payload = gemini::response(&reply).to_string();
        return ("200 OK", "application/json", payload, Some(reply), last);
    }
    if request.method == "POST" && path.contains(":countTokens") {
        let payload = json!({"totalTokens": 10}).to_string();
        return ("200 OK", "application/json", payload, None, Last::None);
    }
    if request.method == "POST" && path.ends_with("/count_tokens") {
        return (
            "200 OK",
            "application/json",
            json!({"input_tokens": 10}).to_string(),
            None,
            Last::None,
        );
    }
    (
        "404 Not Found",
        "application/json",
        json!({"error": {"type": "not_found_error", "message": "not scripted"}}).to_string(),
        None,
        Last::None,
    )
}

/// Anthropic Messages API.
mod anthropic {
    use super::{Last, REPROMPT, Reply, unique};
    use serde_json::{Value, json};

    /// The last input of a Messages request, and whether it offers tools.
    pub fn last(body: &Value) -> (Last, bool) {
        let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let Some(message) = body["messages"].as_array().and_then(|m| m.last()) else {
            return (Last::None, tools);
        };
        let last = match &message["content"] {
            Value::String(text) => Last::Text(text.clone()),
            // Claude Code puts the Stop hook's feedback in a text block beside the last tool
            // result: the feedback, when there is one, is what the model must answer.
            Value::Array(blocks) => {
                let text = blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n");
                if !text.contains(REPROMPT) && blocks.iter().any(|b| b["type"] == "tool_result") {
                    Last::ToolResult
                } else {
                    Last::Text(text)
                }
            }
            _ => Last::None,
        };
        (last, tools)
    }

    /// The absolute `…/src` directory a `pwd` printed in the last tool result, if it did.
    pub fn printed_src(body: &Value) -> Option<String> {
        let blocks = body["messages"].as_array()?.last()?["content"].as_array()?;
        let result = blocks.iter().find(|b| b["type"] == "tool_result")?;
        let text = match &result["content"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return None,
        };
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with('/') && l.ends_with("/src"))
            .map(str::to_owned)
    }

    /// The working directory Claude Code names in its prompt ("Primary working directory:",
    /// in the system prompt or a reminder beside the user's message).
    pub fn working_dir(body: &Value) -> Option<String> {
        const MARKER: &str = "Primary working directory: ";
        match body {
            Value::String(text) => {
                let at = text.find(MARKER)? + MARKER.len();
                let dir = text[at..].lines().next()?.trim();
                dir.starts_with('/').then(|| dir.to_owned())
            }
            Value::Array(items) => items.iter().find_map(working_dir),
            Value::Object(map) => map.values().find_map(working_dir),
            _ => None,
        }
    }

    /// The tools a reply calls, with their inputs, in order (none when it only says something).
    fn tools(reply: &Reply) -> Vec<(&'static str, Value)> {
        match reply {
            Reply::Shell(command) => vec![(
                "Bash",
                json!({"command": command, "description": "Write notes.txt"}),
            )],
            Reply::Subagent(prompt) => vec![("Agent", agent(prompt))],
            Reply::Write(path) => vec![("Write", json!({"file_path": path, "content": "x\n"}))],
            Reply::Reads(paths) => paths
                .iter()
                .map(|p| ("Read", json!({"file_path": p})))
                .collect(),
            Reply::Say(_) => Vec::new(),
        }
    }

    fn content(reply: &Reply) -> Vec<Value> {
        match reply {
            Reply::Say(text) => vec![json!({"type": "text", "text": text})],
            _ => tools(reply)
                .into_iter()
                .map(|(name, input)| {
                    json!({"type": "tool_use", "id": unique("toolu"), "name": name, "input": input})
                })
                .collect(),
        }
    }

    /// The Agent tool's input: a foreground general-purpose subagent.
    fn agent(prompt: &str) -> Value {
        json!({"description": "Write notes.txt", "prompt": prompt,
               "subagent_type": "general-purpose", "run_in_background": false})
    }

    fn stop_reason(reply: &Reply) -> &'static str {
        match reply {
            Reply::Say(_) => "end_turn",
            _ => "tool_use",
        }
    }

    pub fn message(reply: &Reply) -> Value {
        json!({
            "id": unique("msg"), "type": "message", "role": "assistant", "model": "claude-scripted",
            "content": content(reply), "stop_reason": stop_reason(reply), "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        })
    }

    pub fn stream(reply: &Reply) -> String {
        let mut events = vec![(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": unique("msg"), "type": "message", "role": "assistant", "model": "claude-scripted",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            }}),
        )];
        let blocks: Vec<(Value, Value)> = match reply {
            Reply::Say(text) => vec![(
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": text}),
            )],
            _ => tools(reply)
                .into_iter()
                .map(|(name, input)| {
                    (
                        json!({"type": "tool_use", "id": unique("toolu"), "name": name, "input": {}}),
                        json!({"type": "input_json_delta", "partial_json": input.to_string()}),
                    )
                })
                .collect(),
        };
        for (index, (block, delta)) in blocks.into_iter().enumerate() {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            ));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        events.push((
            "message_delta",
            json!({"type": "message_delta", "delta": {
                "stop_reason": stop_reason(reply), "stop_sequence": null},
                "usage": {"output_tokens": 5}}),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect()
    }
}

/// Gemini API (`generateContent`, `streamGenerateContent?alt=sse`).
mod gemini {
    use super::{Last, Reply};
    use serde_json::{Value, json};

    /// The last input of a request, and whether it offers tools.
    pub fn last(body: &Value) -> (Last, bool) {
        let tools = body["tools"].as_array().is_some_and(|tools| {
            tools.iter().any(|t| {
                t["functionDeclarations"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty())
            })
        });
        let Some(content) = body["contents"].as_array().and_then(|c| c.last()) else {
            return (Last::None, tools);
        };
        let parts = content["parts"].as_array().cloned().unwrap_or_default();
        if parts.iter().any(|p| p.get("functionResponse").is_some()) {
            return (Last::ToolResult, tools);
        }
        let text = parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        (Last::Text(text), tools)
    }

    pub fn response(reply: &Reply) -> Value {
        let part = match reply {
            Reply::Shell(command) => json!({"functionCall": {
                "name": "run_shell_command",
                "args": {"command": command, "description": "Write notes.txt"},
            }}),
            Reply::Say(text) => json!({"text": text}),
            Reply::Subagent(_) | Reply::Write(_) | Reply::Reads(_) => {
                unreachable!("scripts for Claude Code")
            }
        };
        json!({
            "candidates": [{
                "content": {"role": "model", "parts": [part]},
                "finishReason": "STOP",
                "index": 0,
            }],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": "gemini-scripted",
        })
    }
}

/// OpenAI Responses API, streamed, as Codex calls it through a custom provider.
mod openai {
    use super::{Last, Reply, unique};
    use serde_json::{Value, json};

    /// The last input item of a request, and the names of the function tools it offers.
    pub fn last(body: &Value) -> (Last, Vec<String>) {
        let tools = body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        let Some(item) = body["input"].as_array().and_then(|i| i.last()) else {
            return (Last::None, tools);
        };
        let last = match item["type"].as_str() {
            Some("function_call_output" | "custom_tool_call_output") => Last::ToolResult,
            _ => match &item["content"] {
                Value::String(text) => Last::Text(text.clone()),
                Value::Array(parts) => Last::Text(
                    parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                _ => Last::None,
            },
        };
        (last, tools)
    }

    /// The call of whichever shell tool the client offers.
    fn shell_call(command: &str, tools: &[String]) -> Value {
        let (name, arguments) = if tools.iter().any(|t| t == "shell_command") {
            ("shell_command", json!({"command": command}))
        } else if tools.iter().any(|t| t == "exec_command") {
            ("exec_command", json!({"cmd": command}))
        } else {
            ("shell", json!({"command": ["bash", "-c", command]}))
        };
        json!({
            "type": "function_call", "id": unique("fc"), "call_id": unique("call"),
            "name": name, "arguments": arguments.to_string(), "status": "completed",
        })
    }

    pub fn stream(reply: &Reply, tools: &[String]) -> String {
        let id = unique("resp");
        let item = match reply {
            Reply::Shell(command) => shell_call(command, tools),
            Reply::Subagent(_) | Reply::Write(_) | Reply::Reads(_) => {
                unreachable!("scripts for Claude Code")
            }
            Reply::Say(text) => json!({
                "type": "message", "id": unique("msg"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }),
        };
        let events = [
            json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": "response.completed", "response": {
                "id": id, "status": "completed", "output": [item],
                "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 15},
            }}),
        ];
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect()
    }
}
