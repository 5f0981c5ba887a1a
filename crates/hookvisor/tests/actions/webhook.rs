//! `action: webhook` (docs/EVENTS.md §4.1 rule 3, §4.3, §5 rules 20 and 22) fired through the real
//! `hookvisor fire`, delivering to receivers each test runs on 127.0.0.1: plain HTTP from a
//! `TcpListener` thread, and HTTPS through rustls with a CA the test makes.

use crate::common;

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;

use common::{Workspace, check, code, json_of, stdout};
use hookvisor_testkit::http::{Answer, Receiver, read_request};
use serde_json::{Value, json};

fn ok() -> Answer {
    (200, String::new(), "thanks".to_owned())
}

/// `.discobot/hooks/NAME.yml` of `ws`: a `task.complete` webhook hook with `front`.
fn hook(ws: &Workspace, name: &str, front: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\nevent: task.complete\naction: webhook\n{front}---\n"),
    );
}

/// `hookvisor fire task.complete --json --data DATA`: the reply.
fn fire(ws: &Workspace, data: &Value) -> Value {
    let out = ws.hookvisor(&[
        "fire",
        "task.complete",
        "--json",
        "--data",
        &data.to_string(),
    ]);
    json_of(&out)
}

fn log(ws: &Workspace, id: &str) -> String {
    let path = ws.state_dir().join(format!("output/{id}.log"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_body_arrives_typed_and_values_stay_values() {
    let ws = Workspace::new();
    let receiver = Receiver::start(vec![ok()]);
    let evil = "say \"hi\"\nthen $(touch pwned) `touch pwned2` \\ done";
    hook(
        &ws,
        "notify",
        &format!(
            "url: \"{}/tasks/${{task_id}}?who=${{who}}\"\nheaders:\n  X-Task: \"task ${{task_id}}\"\n\
             body:\n  n: \"${{n}}\"\n  list: \"${{list}}\"\n  obj: \"${{obj}}\"\n  evil: \"${{evil}}\"\n  \
             text: \"task ${{task_id}} has ${{n}}\"\n  fixed: [1, true, null]\n",
            receiver.url
        ),
    );
    let reply = fire(
        &ws,
        &json!({"task_id": "a/b c", "who": "x&y=z", "n": 5, "list": [1, "a"],
                "obj": {"k": [true]}, "evil": evil}),
    );
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let taken = receiver.taken();
    assert_eq!(taken.len(), 1, "{taken:?}");
    let request = &taken[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/tasks/a%2Fb%20c?who=x%26y%3Dz");
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("x-task"), Some("task a/b c"));
    assert!(
        request.header("x-hookvisor-delivery").is_some(),
        "{request:?}"
    );
    assert_eq!(
        request.json(),
        json!({"n": 5, "list": [1, "a"], "obj": {"k": [true]}, "evil": evil,
               "text": "task a/b c has 5", "fixed": [1, true, null]})
    );
    for file in ["pwned", "pwned2"] {
        assert!(!ws.path().join(file).exists() && !ws.base().join(file).exists());
    }
    // The log shows the templates and the answer, not the values.
    let log = log(&ws, "notify");
    assert!(log.contains("/tasks/${task_id}?who=${who}"), "{log}");
    assert!(
        log.contains("attempt 1: 200 OK") && log.contains("thanks"),
        "{log}"
    );
    assert!(!log.contains("a/b c"), "{log}");
    // `list` shows the fields as written.
    let list = json_of(&ws.hookvisor(&["list", "--json"]));
    let shown = list["hooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["action"] == "webhook")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(shown["method"], "POST");
    assert_eq!(shown["headers"], json!({"X-Task": "task ${task_id}"}));
    assert_eq!(shown["body"]["n"], "${n}");
}

#[test]
fn retries_carry_one_delivery_id_until_a_2xx() {
    let ws = Workspace::new();
    let unavailable = (503, String::new(), "busy".to_owned());
    let receiver = Receiver::start(vec![unavailable.clone(), unavailable, ok()]);
    hook(
        &ws,
        "flaky",
        &format!("url: {}/hook\nbody: {{}}\n", receiver.url),
    );
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let taken = receiver.taken();
    assert_eq!(taken.len(), 3, "{taken:?}");
    let ids: Vec<&str> = taken
        .iter()
        .map(|r| r.header("x-hookvisor-delivery").unwrap())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let log = log(&ws, "flaky");
    assert!(
        log.contains("attempt 1: 503 Service Unavailable\nretrying in 1 s\n")
            && log.contains("attempt 2: 503 Service Unavailable\nretrying in 2 s\n")
            && log.contains("attempt 3: 200 OK"),
        "{log}"
    );
    assert!(log.contains(ids[0]), "{log}");

    // A second firing is a new delivery.
    let again = Receiver::start(vec![ok()]);
    hook(&ws, "flaky", &format!("url: {}/hook\n", again.url));
    fire(&ws, &json!({}));
    let taken = again.taken();
    assert_ne!(taken[0].header("x-hookvisor-delivery"), Some(ids[0]));
}

#[test]
fn a_4xx_fails_at_once_and_a_redirect_is_not_followed() {
    let ws = Workspace::new();
    let target = Receiver::start(vec![ok()]);
    let redirect = Receiver::start(vec![(
        302,
        format!("Location: {}/elsewhere\r\n", target.url),
        String::new(),
    )]);
    let missing = Receiver::start(vec![(404, String::new(), "no such hook".to_owned())]);
    hook(&ws, "moved", &format!("url: {}/old\n", redirect.url));
    hook(&ws, "gone", &format!("url: {}/old\n", missing.url));
    let reply = fire(&ws, &json!({}));
    let results = reply["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{reply}");
    for result in results {
        assert_eq!(result["exitCode"], 1, "{reply}");
    }
    assert_eq!(redirect.taken().len(), 1, "a 3xx is not retried");
    assert!(target.taken().is_empty(), "the redirect was followed");
    assert_eq!(missing.taken().len(), 1, "a 4xx is not retried");
    let moved = log(&ws, "moved");
    assert!(
        moved.contains("302 Found: a redirect to") && moved.contains("not followed"),
        "{moved}"
    );
    let gone = log(&ws, "gone");
    assert!(
        gone.contains("404 Not Found, not retried") && gone.contains("no such hook"),
        "{gone}"
    );
}

#[test]
fn plain_http_goes_only_to_loopback() {
    let ws = Workspace::new();
    // At load: a written-out host.
    hook(&ws, "insecure", "url: http://example.com/hook\n");
    let out = ws.hookvisor(&["check"]);
    assert_ne!(code(&out), 0);
    let text = format!("{}{}", stdout(&out), common::stderr(&out));
    assert!(
        text.contains("insecure.yml:4: url: http to example.com would send the request in clear text; use https://"),
        "{text}"
    );
    // At send: a URL the event supplies.
    hook(&ws, "insecure", "url: \"${target}\"\n");
    check(ws.hookvisor(&["check"]), "check");
    let reply = fire(&ws, &json!({"target": "http://example.com/hook"}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    let log = log(&ws, "insecure");
    assert!(
        log.contains("webhook: url: http to example.com would send"),
        "{log}"
    );
    // Loopback is fine, through a variable too.
    let receiver = Receiver::start(vec![ok()]);
    let reply = fire(&ws, &json!({"target": format!("{}/x", receiver.url)}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    assert_eq!(receiver.taken().len(), 1);
}

#[test]
fn a_line_break_in_a_header_value_fails_the_run() {
    let ws = Workspace::new();
    let receiver = Receiver::start(vec![ok()]);
    hook(
        &ws,
        "inject",
        &format!(
            "url: {}/x\nheaders:\n  X-Task: \"${{task_id}}\"\n",
            receiver.url
        ),
    );
    let reply = fire(&ws, &json!({"task_id": "t\r\nX-Injected: yes"}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(receiver.taken().is_empty());
    let log = log(&ws, "inject");
    assert!(
        log.contains("webhook: headers: X-Task: the expanded value holds a CR"),
        "{log}"
    );
}

/// The private home's `secrets.env`, with `mode`.
fn secrets(ws: &Workspace, text: &str, mode: u32) -> std::path::PathBuf {
    let dir = ws.base().join("home/.config/hookvisor");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secrets.env");
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn a_secret_reaches_the_receiver_and_nothing_else() {
    let ws = Workspace::new();
    let token = "tok-5f2a9c-secret";
    // The receiver echoes it back: the log must not keep it.
    let receiver = Receiver::start(vec![(200, String::new(), format!("seen {token}"))]);
    let host = receiver.host();
    secrets(
        &ws,
        &format!("# chat\nexport CHAT_TOKEN=\"{token}\"\nCHAT_TOKEN_HOSTS={host}\n"),
        0o600,
    );
    hook(
        &ws,
        "chat",
        &format!(
            "url: {}/x\nheaders:\n  Authorization: \"Bearer ${{CHAT_TOKEN}}\"\n  X-Env: \"${{ENV_ONLY_KEY}}\"\n\
             body: {{t: \"${{chat_token}}\"}}\n",
            receiver.url
        ),
    );
    // A command hook of the same event records its environment.
    let env_file = ws.base().join("env.txt");
    ws.write(
        ".discobot/hooks/zz-env.yml",
        &format!(
            "---\nevent: task.complete\nargv: [sh, -c, \"env > {}\"]\n---\n",
            env_file.display()
        ),
    );
    // A name secrets.env lacks comes from hookvisor's own environment.
    let env_value = "env-only-7d1e";
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.complete", "--json"])
        .env("ENV_ONLY_KEY", env_value)
        .env("ENV_ONLY_KEY_HOSTS", host)
        .output()
        .unwrap();
    let reply = json_of(&out);
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let taken = receiver.taken();
    assert_eq!(
        taken[0].header("authorization"),
        Some(&*format!("Bearer {token}"))
    );
    assert_eq!(taken[0].header("x-env"), Some(env_value));
    assert!(files_holding(ws.state_dir(), env_value.as_bytes()).is_empty());
    assert_eq!(taken[0].json(), json!({"t": token}));
    let leaked = files_holding(ws.state_dir(), token.as_bytes());
    assert!(leaked.is_empty(), "the secret is in {leaked:?}");
    assert!(log(&ws, "chat").contains("seen [secret]"));
    let env = fs::read_to_string(&env_file).unwrap();
    assert!(!env.contains(token), "{env}");
    assert!(!reply.to_string().contains(token), "{reply}");

    // A file others can read is refused, with the fix.
    hook(
        &ws,
        "chat",
        &format!(
            "url: {}/x\nheaders:\n  Authorization: \"Bearer ${{CHAT_TOKEN}}\"\n",
            receiver.url
        ),
    );
    let path = secrets(&ws, &format!("CHAT_TOKEN={token}\n"), 0o644);
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(receiver.taken().is_empty());
    let refused = log(&ws, "chat");
    assert!(
        refused.contains(&format!(
            "mode 644 lets other users read secrets; run `chmod 600 {}`",
            path.display()
        )),
        "{refused}"
    );

    // A secret never goes to a URL the event chose.
    secrets(&ws, &format!("CHAT_TOKEN={token}\n"), 0o600);
    hook(
        &ws,
        "chat",
        "url: \"${target}\"\nheaders:\n  Authorization: \"Bearer ${CHAT_TOKEN}\"\n",
    );
    let reply = fire(&ws, &json!({"target": format!("{}/x", receiver.url)}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(receiver.taken().is_empty());
    assert!(
        log(&ws, "chat")
            .contains("${chat_token} is a secret, and the url is ${target} from the event"),
        "{}",
        log(&ws, "chat")
    );
    // Nor does a secrets.env value go to a url from hookvisor's environment.
    hook(
        &ws,
        "chat",
        "url: \"${ENV_URL}\"\nheaders:\n  Authorization: \"Bearer ${CHAT_TOKEN}\"\n",
    );
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.complete", "--json"])
        .env("ENV_URL", format!("{}/x", receiver.url))
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["results"][0]["exitCode"], 1);
    assert!(receiver.taken().is_empty());
    assert!(
        log(&ws, "chat").contains("from hookvisor's environment"),
        "{}",
        log(&ws, "chat")
    );
    // A url that secrets.env writes may carry secrets, and stays out of the log itself.
    secrets(
        &ws,
        &format!(
            "CHAT_TOKEN={token}\nCHAT_TOKEN_HOSTS={host}\nCHAT_URL={}/x/{token}\n",
            receiver.url
        ),
        0o600,
    );
    hook(
        &ws,
        "chat",
        "url: \"${CHAT_URL}\"\nheaders:\n  Authorization: \"Bearer ${CHAT_TOKEN}\"\n",
    );
    let reply = fire(&ws, &json!({"chat_url": "https://attacker.example/x"}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(
        log(&ws, "chat").contains("${chat_url} is both a key of the event's data and CHAT_URL"),
        "{}",
        log(&ws, "chat")
    );
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let taken = receiver.taken();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].path, format!("/x/{token}"));
    let leaked = files_holding(ws.state_dir(), token.as_bytes());
    assert!(leaked.is_empty(), "the secret is in {leaked:?}");
}

#[test]
fn https_to_localhost_through_a_test_ca() {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let ws = Workspace::new();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "hookvisor test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let ca_file = ws.base().join("ca.pem");
    fs::write(&ca_file, ca_cert.pem()).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        )
        .unwrap();
    let config = Arc::new(config);
    let receiver = Receiver::start_with(vec![ok()], move |stream| {
        let connection = rustls::ServerConnection::new(config.clone()).unwrap();
        Box::new(rustls::StreamOwned::new(connection, stream))
    });
    let port = receiver.url.rsplit(':').next().unwrap();
    hook(
        &ws,
        "secure",
        &format!("url: https://localhost:{port}/x\nbody: {{ok: true}}\n"),
    );
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.complete", "--json"])
        .env("SSL_CERT_FILE", &ca_file)
        .output()
        .unwrap();
    let reply = json_of(&out);
    assert_eq!(
        reply["results"][0]["exitCode"],
        0,
        "{reply}\n{}",
        log(&ws, "secure")
    );
    let taken = receiver.taken();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].json(), json!({"ok": true}));

    // Without the CA the certificate is not trusted and nothing is delivered.
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.complete", "--json"])
        .env("SSL_CERT_FILE", ws.base().join("no-such-file.pem"))
        .output()
        .unwrap();
    let reply = json_of(&out);
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(receiver.taken().is_empty());
    // A refused certificate is final: the next attempt would meet the same one.
    let log = log(&ws, "secure");
    assert!(
        log.contains("attempt 1: TLS: invalid peer certificate: UnknownIssuer; if the server's CA")
            && !log.contains("attempt 2"),
        "{log}"
    );
}

#[test]
fn check_warns_about_names_nothing_defines() {
    let ws = Workspace::new();
    hook(
        &ws,
        "chat",
        "url: https://example.com/x\nheaders:\n  A: \"${CHAT_TOKEN}\"\n  B: \"${task_id}\"\n",
    );
    let warned = |ws: &Workspace| {
        let out = ws.hookvisor(&["check"]);
        format!("{}{}", stdout(&out), common::stderr(&out))
    };
    let text = warned(&ws);
    assert!(
        text.contains("${chat_token} is no variable hookvisor sets, and neither")
            && text.contains("defines CHAT_TOKEN"),
        "{text}"
    );
    assert!(!text.contains("${task_id}"), "{text}");
    secrets(&ws, "CHAT_TOKEN=x\n", 0o600);
    let text = warned(&ws);
    assert!(!text.contains("chat_token"), "{text}");
}

/// `hookvisor fire` started with `hook`'s receiver, then SIGINT once the receiver took its
/// `nth` request: how long `fire` took to end after the signal.
fn interrupted_at_request(nth: usize, answers: Vec<Answer>) -> (std::time::Duration, Receiver) {
    let ws = Workspace::new();
    let receiver = Receiver::start(answers);
    hook(&ws, "slow", &format!("url: {}/x\n", receiver.url));
    let mut child = ws
        .hookvisor_command()
        .args(["fire", "task.complete", "--json"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..nth {
        let request = receiver
            .requests
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the attempt arrives");
        assert_eq!(request.method, "POST");
    }
    let signalled = std::time::Instant::now();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    child.wait().unwrap();
    (signalled.elapsed(), receiver)
}

#[test]
fn a_cancel_ends_the_backoff_and_an_attempt_in_flight() {
    // Between attempts: the third 503 is followed by a 4 s wait (after 1 and 2 s), which the
    // cancel cuts short, and no fourth attempt is made. (The signal may also meet the third
    // attempt still reading its answer: cut short as well.) 4 s leaves a loaded machine room
    // that the first wait's 1 s did not.
    let (took, receiver) = interrupted_at_request(3, vec![(503, String::new(), String::new())]);
    assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    assert!(receiver.taken().is_empty(), "a retry was sent");
    // During an attempt: the receiver never answers; the 30 s attempt is not waited for.
    let (took, _receiver) = interrupted_at_request(1, vec![(0, String::new(), String::new())]);
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

#[test]
fn the_response_body_is_read_up_to_64_kib() {
    let ws = Workspace::new();
    let big = "y".repeat(200 * 1024);
    let receiver = Receiver::start(vec![(200, String::new(), big)]);
    hook(&ws, "big", &format!("url: {}/x\n", receiver.url));
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let whole = log(&ws, "big");
    assert!(
        whole.contains("response (200 OK, 65536 bytes, the rest not read):\n"),
        "{}",
        &whole[..whole.len().min(400)]
    );
    assert!(whole.contains(&"y".repeat(64 * 1024)) && !whole.contains(&"y".repeat(64 * 1024 + 1)));
    // A body that breaks off before its Content-Length is marked as cut, not logged as whole.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        read_request(&mut stream).unwrap();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello")
            .unwrap();
    });
    hook(&ws, "big", &format!("url: http://127.0.0.1:{port}/x\n"));
    let reply = fire(&ws, &json!({}));
    server.join().unwrap();
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let cut = log(&ws, "big");
    assert!(
        cut.contains("response (200 OK, 5 bytes, the rest not read):\nhello"),
        "{cut}"
    );
}

#[test]
fn a_secret_goes_only_to_the_hosts_its_list_names() {
    let ws = Workspace::new();
    let receiver = Receiver::start(vec![ok()]);
    let token = "tok-Sup3rS3cret+/=";
    let with_hosts = |hosts: &str| {
        secrets(&ws, &format!("API_TOKEN={token}\n{hosts}"), 0o600);
    };
    // A hook the agent could have written: its own listener on loopback.
    hook(
        &ws,
        "exfil",
        &format!(
            "url: \"{}/c?t=${{API_TOKEN}}\"\nheaders:\n  X-T: \"${{api_token}}\"\n",
            receiver.url
        ),
    );
    let refused = |ws: &Workspace, needle: &str| {
        let reply = fire(ws, &json!({}));
        assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
        let text = log(ws, "exfil");
        assert!(text.contains(needle), "{needle:?} not in {text}");
        assert!(!text.contains(token), "{text}");
    };
    let host = receiver.host().to_owned();
    with_hosts("");
    refused(
        &ws,
        &format!(
            "webhook: url: ${{api_token}} is a secret and may not go to {host}: secrets.env has \
             no API_TOKEN_HOSTS; add API_TOKEN_HOSTS={host} to ~/.config/hookvisor/secrets.env"
        ),
    );
    // A loopback host without its port, another port, another host: refused alike.
    for list in ["127.0.0.1", "127.0.0.1:1", "*.example.com, example.com"] {
        with_hosts(&format!("API_TOKEN_HOSTS={list}\n"));
        refused(&ws, "API_TOKEN_HOSTS in secrets.env does not list it");
    }
    with_hosts("API_TOKEN_HOSTS=api.example.com:x\n");
    refused(&ws, "holds 'api.example.com:x', which is no host");
    assert!(receiver.taken().is_empty());
    with_hosts(&format!("API_TOKEN_HOSTS=api.example.com, {host}\n"));
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    assert_eq!(receiver.taken()[0].header("x-t"), Some(token));

    // A value of hookvisor's environment: NAME_HOSTS from the environment too.
    hook(
        &ws,
        "exfil",
        &format!(
            "url: \"{}/c\"\nbody: {{e: \"${{cloud_key}}\"}}\n",
            receiver.url
        ),
    );
    let env_fire = |vars: &[(&str, &str)]| {
        let mut command = ws.hookvisor_command();
        command.args(["fire", "task.complete", "--json"]);
        for (name, value) in vars {
            command.env(name, value);
        }
        json_of(&command.output().unwrap())["results"][0]["exitCode"].clone()
    };
    assert_eq!(env_fire(&[("CLOUD_KEY", "ck-1")]), 1);
    assert!(
        log(&ws, "exfil").contains(&format!(
            "hookvisor's environment has no CLOUD_KEY_HOSTS; set CLOUD_KEY_HOSTS={host} in \
             hookvisor's environment"
        )),
        "{}",
        log(&ws, "exfil")
    );
    assert!(receiver.taken().is_empty());
    assert_eq!(
        env_fire(&[("CLOUD_KEY", "ck-1"), ("CLOUD_KEY_HOSTS", &host)]),
        0
    );
    assert_eq!(receiver.taken()[0].json(), json!({"e": "ck-1"}));
    // hookvisor's own variables never resolve, listed or not.
    hook(
        &ws,
        "exfil",
        &format!(
            "url: \"{}/c\"\nbody: \"${{hookvisor_token}}\"\n",
            receiver.url
        ),
    );
    let vars = [
        ("HOOKVISOR_TOKEN", "hv-token-1"),
        ("HOOKVISOR_TOKEN_HOSTS", host.as_str()),
    ];
    assert_eq!(env_fire(&vars), 1);
    assert!(
        log(&ws, "exfil").contains("neither secrets.env nor hookvisor's environment has"),
        "{}",
        log(&ws, "exfil")
    );

    // A url that is one secret is exempt for its own value, not for another secret.
    secrets(
        &ws,
        &format!("API_TOKEN={token}\nCHAT_URL={}/hook/id-77\n", receiver.url),
        0o600,
    );
    hook(
        &ws,
        "exfil",
        "url: \"${CHAT_URL}\"\nbody: {u: \"${chat_url}\"}\n",
    );
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    assert_eq!(receiver.taken()[0].path, "/hook/id-77");
    hook(
        &ws,
        "exfil",
        "url: \"${CHAT_URL}\"\nheaders:\n  X-T: \"${API_TOKEN}\"\n",
    );
    refused(
        &ws,
        "headers: X-T: ${api_token} is a secret and may not go to",
    );
    assert!(receiver.taken().is_empty());
}

#[test]
fn a_data_key_never_replaces_a_secret() {
    let ws = Workspace::new();
    let receiver = Receiver::start(vec![ok()]);
    secrets(
        &ws,
        &format!(
            "DISCORD_HOOK=real-id\nAPI_TOKEN=tok-1234\nAPI_TOKEN_HOSTS={}\nDISCORD_HOOK_HOSTS={}\n",
            receiver.host(),
            receiver.host()
        ),
        0o600,
    );
    hook(
        &ws,
        "chat",
        &format!(
            "url: \"{}/api/webhooks/${{DISCORD_HOOK}}\"\nheaders:\n  X-Api: \"${{API_TOKEN}}\"\n",
            receiver.url
        ),
    );
    let reply = fire(&ws, &json!({"Discord_Hook": "666"}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(receiver.taken().is_empty());
    let text = log(&ws, "chat");
    assert!(
        text.contains(
            "webhook: url: ${discord_hook} is both a key of the event's data and DISCORD_HOOK in \
             secrets.env; rename the data key or the secret"
        ),
        "{text}"
    );
    let reply = fire(&ws, &json!({"other": "666"}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    assert_eq!(receiver.taken()[0].path, "/api/webhooks/real-id");
}

#[test]
fn a_value_never_climbs_the_url_path() {
    let ws = Workspace::new();
    let receiver = Receiver::start(vec![ok()]);
    hook(
        &ws,
        "trav",
        &format!(
            "url: \"{}/api/v1/projects/${{task_id}}/notify%2e${{suffix}}?q=${{q}}\"\n",
            receiver.url
        ),
    );
    for (data, name) in [
        (json!({"task_id": "..", "suffix": "", "q": "1"}), "task_id"),
        (json!({"task_id": ".", "suffix": "", "q": "1"}), "task_id"),
        (json!({"task_id": "a", "suffix": "", "q": ".."}), "q"),
    ] {
        let reply = fire(&ws, &data);
        assert_eq!(reply["results"][0]["exitCode"], 1, "{data}: {reply}");
        let text = log(&ws, "trav");
        assert!(
            text.contains(&format!(
                "webhook: url: ${{{name}}} makes a '.' or '..' (or %2e) segment"
            )),
            "{data}: {text}"
        );
    }
    assert!(receiver.taken().is_empty());
    // Dots inside a longer value are no segment of their own.
    let reply = fire(&ws, &json!({"task_id": "..a", "suffix": "x", "q": "."}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    let reply = fire(&ws, &json!({"task_id": "..a", "suffix": "x", "q": "a.b"}));
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    assert_eq!(
        receiver.taken()[0].path,
        "/api/v1/projects/..a/notify%2ex?q=a.b"
    );
}

#[test]
fn every_form_of_a_secret_is_masked_in_the_log() {
    use base64::Engine as _;
    let ws = Workspace::new();
    let token = "tok-Sup3rS3cret+/=";
    let quoted = r#"ab"c\d"#;
    let engine = base64::engine::general_purpose::STANDARD;
    // What a receiver echoing the request would show: each form hookvisor produced.
    let echoed = [
        "tok-Sup3rS3cret%2B%2F%3D".to_owned(),
        r#"ab\"c\\d"#.to_owned(),
        engine.encode(format!("user:{token}")),
        engine.encode(token),
        "pin=42".to_owned(),
    ];
    let receiver = Receiver::start(vec![(400, String::new(), echoed.join(" | "))]);
    secrets(
        &ws,
        &format!(
            "API_TOKEN={token}\nQ={quoted}\nPIN=42\nAPI_TOKEN_HOSTS={h}\nQ_HOSTS={h}\nPIN_HOSTS={h}\n",
            h = receiver.host()
        ),
        0o600,
    );
    hook(
        &ws,
        "echo",
        &format!(
            "url: \"{}/c?t=${{API_TOKEN}}\"\nbody: {{q: \"${{q}}\", p: \"${{pin}}\"}}\n",
            receiver.url
        ),
    );
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    let text = log(&ws, "echo");
    for form in &echoed {
        assert!(!text.contains(form.as_str()), "{form} in {text}");
    }
    assert!(text.matches("[secret]").count() >= echoed.len(), "{text}");
    assert!(!reply.to_string().contains(token), "{reply}");
}

#[test]
fn on_failure_retry_is_refused_on_a_webhook() {
    let ws = Workspace::new();
    hook(
        &ws,
        "dup",
        "url: \"http://127.0.0.1:9/dup\"\non_failure: retry\nretries: 1\n",
    );
    let out = ws.hookvisor(&["check"]);
    assert_ne!(code(&out), 0);
    let text = format!("{}{}", stdout(&out), common::stderr(&out));
    assert!(
        text.contains(
            "dup.yml:5: webhooks retry by themselves (3 retries under one delivery id); remove \
             on_failure: retry"
        ),
        "{text}"
    );
    hook(
        &ws,
        "dup",
        "url: \"http://127.0.0.1:9/dup\"\non_failure: abort\n",
    );
    check(ws.hookvisor(&["check"]), "check");
}

/// The pids of live processes whose command line holds every one of `words`.
fn processes_with(words: &[&str]) -> Vec<i32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                words.iter().all(|w| text.contains(w))
            })
        })
        .collect()
}

/// docs/EVENTS.md §4.3: `fire` exits with its decision and leaves an unawaited webhook to a
/// detached child, which delivers and records the run; the agent never waits for the receiver.
#[test]
fn an_unawaited_webhook_is_delivered_by_a_detached_child_after_fire_exits() {
    let ws = Workspace::new();
    // A receiver that takes the request and never answers: a `fire` that delivered in its own
    // process could not have exited while it holds the request.
    let held = Receiver::start(vec![(0, String::new(), String::new())]);
    hook(
        &ws,
        "notify",
        &format!(
            "await: false\ntimeout: 20\nurl: {}/held\nbody: {{n: \"${{n}}\"}}\n",
            held.url
        ),
    );
    let reply = fire(&ws, &json!({"n": 7}));
    assert_eq!(reply["decision"], "allow", "{reply}");
    let request = held
        .requests
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the detached child delivers");
    assert_eq!(request.json(), json!({"n": 7}));
    let workspace = ws.path().to_str().unwrap();
    let children = processes_with(&["--deliver", "notify", workspace]);
    assert_eq!(children.len(), 1, "one detached delivery is still waiting");
    for pid in children {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    // Answered: the child records the run as any run is recorded.
    let answering = Receiver::start(vec![ok()]);
    hook(
        &ws,
        "notify",
        &format!("await: false\nurl: {}/ok\n", answering.url),
    );
    let reply = fire(&ws, &json!({}));
    assert_eq!(reply["decision"], "allow", "{reply}");
    answering
        .requests
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the detached child delivers");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status: Value = fs::read(ws.state_dir().join("status.json"))
            .map_or(Value::Null, |bytes| serde_json::from_slice(&bytes).unwrap());
        if status["hooks"]["notify"]["lastResult"] == "success" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never recorded: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
