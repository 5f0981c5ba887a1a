//! The `webhook` action (docs/EVENTS.md §1.2, §4.1 rule 3, §4.3, §5 rules 20 and 22): an HTTP
//! request built from templates, sent under one delivery id with retries.
//!
//! The rules, written once here:
//!
//! 1. **Declarative only.** `action: webhook` is written in a non-executable `.yml` hook:
//!    `url` (required), `method` (`GET`, `POST`, `PUT`, `PATCH` or `DELETE`, any case; default
//!    `POST`), `headers` (a mapping of header names to text templates), `body` (any YAML value:
//!    the JSON template; not with `GET`), and for a webhook that waits for its callback (it
//!    names `${callback_url}`) `callback_port` (its listener's port, 1–65535) and `on_timeout`
//!    (`abort`, the default, or `continue`). Its `timeout` defaults to 30 s, or 3600 s when it
//!    waits for a callback.
//! 2. **URL template.** The scheme and host (`https://host:port`) are written out, or the
//!    whole URL is one `${name}`; placeholders after the host (path, query, fragment) insert
//!    their value percent-encoded, every byte but `A-Z a-z 0-9 - . _ ~`, so a value stays
//!    within its segment (`../x` cannot climb, `a&b=c` adds no parameter).
//!    A value that is `.` or `..`, or a path segment that a value makes `.` or `..` once
//!    decoded (`%2e` counts as a dot), fails the run: the URL parser would climb the path.
//! 3. **Policy** (`url_policy`). `https` only, except `http` to a literally loopback host:
//!    `127.0.0.0/8`, `::1` or `localhost` (which must resolve to loopback addresses only). A
//!    name that merely resolves to loopback needs https. Checked at load when the scheme and
//!    host are literal, and at send on the expanded URL.
//! 4. **Body template** (`expand`). A string that is exactly one `${name}` takes the value's
//!    JSON type (a JSON variable stays JSON, `${iteration}` is a number, a list is a list,
//!    other values strings); a placeholder inside a longer string inserts the value's text.
//!    The body is built as a JSON value and serialized once: values never become JSON text.
//!    Object keys are literal. Headers are text templates; a CR, LF or NUL in an expanded
//!    header value fails the run, naming the header (any other control character but tab
//!    too: no server takes one).
//! 5. **Names.** A name the event has (its variables and `data` keys) is the event's;
//!    `callback_url` is only the one the caller supplies (the listener's), never a `data`
//!    key. A name hookvisor knows (`payload`'s list) but the event lacks is an error. Any
//!    other name resolves from `secrets.env` ([`crate::secrets`]), then hookvisor's own
//!    environment, and nowhere else; unknown everywhere, the run fails naming it. A secret
//!    goes only to a URL the hook or `secrets.env` writes: never to a whole-URL variable the
//!    event supplied (the event could point it anywhere), and a `secrets.env` value never to
//!    one from hookvisor's environment (which an agent that runs hookvisor chose).
//!    A `data` key that is also a secrets.env name fails the run: the agent could otherwise
//!    replace a secret the hook meant (a webhook url's id).
//!    No `HOOKVISOR_*` variable resolves from the environment: those are hookvisor's own
//!    (its server's token among them).
//! 6. **Delivery** (`deliver`). No proxy, no redirect followed (a 3xx fails), 30 s per
//!    attempt (less when the hook's `timeout` is shorter and no callback is awaited), 2xx is
//!    success. Connect errors, timeouts and 5xx are retried 3 times after 1, 2 and 4 s, every
//!    attempt carrying the same `X-Hookvisor-Delivery` id; 3xx, 4xx and a refused certificate
//!    are not retried. A cancel ends the delivery at once, in a wait between attempts or during
//!    one (whose request may still arrive: the client cannot be interrupted, so its thread is
//!    left to end within the attempt's time).
//!    `on_failure: retry` is refused at load: re-running the hook would resend under a new
//!    delivery id, 4xx included.
//! 7. **The log** shows the templates (url, headers, body) as written, each attempt's status
//!    and the response body (the first 64 KiB, which is also the run's stdout, for
//!    `${hook_response}`); a resolved value is never written, and a secret's value echoed back
//!    by the receiver is masked, also percent-encoded, JSON-escaped or in base64, however
//!    short (an empty value hides nothing).
//! 8. **Secret hosts** (`secret_hosts`). A secret named `NAME` goes only to a host that
//!    `NAME_HOSTS` (comma-separated: `host`, `host:port`, `*.example.com`) lists, from the same
//!    place as the value (secrets.env, or hookvisor's environment); a loopback host only as
//!    `host:port`. Hosts compare after the URL parser's normalisation. A url that is one
//!    secret is exempt for its own value, not for any other secret it carries.
//! 9. **Awaited** (`awaited`, §4.3, §5 rule 22). A webhook naming `${callback_url}` first
//!    registers a wait on the process's `callback` listener (crate `hookvisor-actions`; port:
//!    `callback_port`, else `callback.port` of `.discobot/hookvisor.yml`, else ephemeral),
//!    sends with that URL,
//!    and, once delivered, waits up to its `timeout` (each send attempt keeps its own 30 s). A
//!    wait that cannot start (no listener, a request that cannot be expanded or delivered) is
//!    judged as a timeout, so under `on_timeout: abort` asking that failed never opens a gate
//!    (the agent can make a request fail). The callback's
//!    `approve`/`continue`/`none` is a success; `block` is a block with its `message`, said to
//!    the judge as `{"decision":"block"}` so only a `pre` hook of a gate blocks and a notice's
//!    block is logged and ignored; `reject`/`abort`/`deny` fails the run and aborts the event
//!    whatever `on_failure` says. No callback in time is a timeout (exit 124): `on_timeout:
//!    abort` aborts the event, `continue` leaves a failure judged like any other. A taken
//!    callback hands `${hook_response}` (`{"query":…,"body":…}`) to the later hooks of the
//!    firing. The wait's state goes to the hook's `callback` field in `status.json` (waiting,
//!    answered, timed_out, revoked), never the URL.
//!
//! This file holds the fields (rule 1, the load half of 2 and 3) and `url_policy` rule 3. The
//! runner, in the crate `hookvisor-actions`, holds the rest: `expand` rules 2, 4, 5 and 8,
//! `deliver` rule 6, `run` one run with its log (rule 7), `secret_hosts` the host lists of
//! rule 8 and `awaited` the callback wait (rule 9).

#![forbid(unsafe_code)]

pub mod url_policy;

use std::time::Duration;

use serde_json::{Value as Json, json};

use crate::policy::OnTimeout;

pub use self::url_policy::UrlPolicyError;

/// The timeout of a webhook hook without `timeout:` (docs/EVENTS.md §1.3).
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// The timeout of a webhook awaiting a callback without `timeout:` (docs/EVENTS.md §1.3).
pub const DEFAULT_CALLBACK_TIMEOUT: Duration = Duration::from_secs(3600);

/// The front matter fields of `action: webhook`. Known to `check`, and like the other actions'
/// they do not make a phase-1 script an event hook.
pub(crate) const WEBHOOK_FIELDS: [&str; 5] = ["url", "method", "headers", "body", "callback_port"];

/// Headers hookvisor sets itself or the transport owns; a hook may not set them.
const RESERVED_HEADERS: [&str; 6] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "x-hookvisor-delivery",
    "upgrade",
];

/// An HTTP method a webhook may use (rule 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`, without a body.
    Get,
    /// `POST`, the default.
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// The method as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// How the URL is written (rule 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlTemplate {
    /// The scheme and host written out; placeholders may follow in the path and query.
    Literal(String),
    /// The whole URL is this one variable (lower-cased name).
    Whole(String),
}

/// `action: webhook` and its fields (rule 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// `url:`.
    pub url: UrlTemplate,
    /// `method:`; default [`Method::Post`].
    pub method: Method,
    /// `headers:`, name and value template, in the order written.
    pub headers: Vec<(String, String)>,
    /// `body:`, the JSON template; `None` without the field.
    pub body: Option<Json>,
    /// `callback_port:`, for the callback listener of an awaited webhook.
    pub callback_port: Option<u16>,
    /// `on_timeout:`, what a callback that does not come in time means; default
    /// [`OnTimeout::Abort`]. Only for a webhook that awaits one.
    pub on_timeout: OnTimeout,
}

/// Why the fields of a webhook hook do not load; each names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookFieldError {
    /// The action is in an executable script (rule 1).
    #[error(
        "action 'webhook' is for a declarative hook: put it in a non-executable .yml file of \
         front matter only (chmod -x), or drop 'action:' to run this script"
    )]
    NotDeclarative,
    /// `run:` or `argv:` belong to `action: command`.
    #[error("'{0}' is no field of action 'webhook'; drop it, or use action: command")]
    CommandField(&'static str),
    /// No `url:`.
    #[error("action 'webhook' needs 'url: https://host/path'")]
    MissingUrl,
    /// The URL's scheme and host are neither written out nor one whole variable (rule 2).
    #[error(
        "url: '{url}': write the scheme and host out (https://host/${{x}}) or make the whole \
         url one variable ('${{name}}'); a placeholder may not choose the host"
    )]
    UrlHost {
        /// The URL as written.
        url: String,
    },
    /// The URL does not parse.
    #[error("url: '{url}' is no URL ({reason}); write it as https://host/path")]
    UrlSyntax {
        /// The URL as written.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// The written-out scheme and host break the policy (rule 3).
    #[error("url: {0}")]
    UrlPolicy(UrlPolicyError),
    /// `method:` is not one of its words.
    #[error("method: '{value}' is not GET, POST, PUT, PATCH or DELETE")]
    Method {
        /// The value.
        value: String,
    },
    /// `headers:` is not a mapping of names to text.
    #[error(
        "headers: give a mapping of header names to text, as in 'headers: {{Authorization: \
         \"Bearer ${{API_TOKEN}}\"}}'"
    )]
    Headers,
    /// A header name is no HTTP token, or one hookvisor sets itself.
    #[error("headers: '{name}' {why}")]
    HeaderName {
        /// The name.
        name: String,
        /// Why and the fix.
        why: &'static str,
    },
    /// `body:` with `GET`.
    #[error("body: a GET sends no body; use method: POST, or put the values in the url's query")]
    BodyWithGet,
    /// `on_timeout:` is no word of it, or the webhook awaits no callback.
    #[error("on_timeout: {0}")]
    OnTimeout(String),
    /// `on_failure: retry`: the delivery retries itself under one id (rule 6).
    #[error(
        "webhooks retry by themselves (3 retries under one delivery id); remove on_failure: retry"
    )]
    RetriesItself,
    /// `callback_port:` is no port.
    #[error("callback_port: '{value}' is no port; give a number from 1 to 65535")]
    CallbackPort {
        /// The value.
        value: String,
    },
}

impl WebhookFieldError {
    /// The field the error is about, for its line; `None` for the whole entry.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            WebhookFieldError::NotDeclarative => Some("action"),
            WebhookFieldError::CommandField(key) => Some(key),
            WebhookFieldError::MissingUrl => None,
            WebhookFieldError::UrlHost { .. }
            | WebhookFieldError::UrlSyntax { .. }
            | WebhookFieldError::UrlPolicy(_) => Some("url"),
            WebhookFieldError::Method { .. } => Some("method"),
            WebhookFieldError::Headers | WebhookFieldError::HeaderName { .. } => Some("headers"),
            WebhookFieldError::BodyWithGet => Some("body"),
            WebhookFieldError::CallbackPort { .. } => Some("callback_port"),
            WebhookFieldError::OnTimeout(_) => Some("on_timeout"),
            WebhookFieldError::RetriesItself => Some("on_failure"),
        }
    }
}

impl Webhook {
    /// Reads the fields of `action: webhook`: `field` gives a field's value as written
    /// (`headers` and `body` as the JSON text front matter keeps them in).
    pub(crate) fn from_fields<'a>(
        field: impl Fn(&str) -> Option<&'a str>,
        declarative: bool,
    ) -> Result<Webhook, WebhookFieldError> {
        if !declarative {
            return Err(WebhookFieldError::NotDeclarative);
        }
        for key in ["run", "argv"] {
            if field(key).is_some() {
                return Err(WebhookFieldError::CommandField(key));
            }
        }
        let url = parse_url(field("url").ok_or(WebhookFieldError::MissingUrl)?)?;
        let method = match field("method") {
            None => Method::Post,
            Some(value) => match value.to_ascii_uppercase().as_str() {
                "GET" => Method::Get,
                "POST" => Method::Post,
                "PUT" => Method::Put,
                "PATCH" => Method::Patch,
                "DELETE" => Method::Delete,
                _ => {
                    return Err(WebhookFieldError::Method {
                        value: value.to_owned(),
                    });
                }
            },
        };
        let headers = match field("headers") {
            None => Vec::new(),
            Some(text) => parse_headers(text)?,
        };
        // Front matter keeps `body` as JSON text; a body read by the flat reader (not YAML)
        // is its text, which is a JSON string unless it is JSON already.
        let body =
            field("body").map(|text| serde_json::from_str(text).unwrap_or_else(|_| json!(text)));
        if body.is_some() && method == Method::Get {
            return Err(WebhookFieldError::BodyWithGet);
        }
        let callback_port = match field("callback_port") {
            None => None,
            Some(value) => match value.parse::<u16>() {
                Ok(port) if port > 0 => Some(port),
                _ => {
                    return Err(WebhookFieldError::CallbackPort {
                        value: value.to_owned(),
                    });
                }
            },
        };
        let on_timeout = match field("on_timeout") {
            None => OnTimeout::default(),
            Some(value) => value.parse().map_err(|_| {
                WebhookFieldError::OnTimeout(format!("'{value}' is not abort or continue"))
            })?,
        };
        let webhook = Webhook {
            url,
            method,
            headers,
            body,
            callback_port,
            on_timeout,
        };
        // A webhook that waits for nothing cannot time out waiting: the field would be dropped
        // without a word.
        if field("on_timeout").is_some() && !webhook.awaits_callback() {
            return Err(WebhookFieldError::OnTimeout(
                "only a webhook that waits for its callback (one that sends ${callback_url}) \
                 times out waiting; drop it, or send ${callback_url}"
                    .to_owned(),
            ));
        }
        Ok(webhook)
    }

    /// The fields as `list` shows them, in front matter spelling: the templates, never a value.
    pub fn fields(&self) -> Vec<(&'static str, Json)> {
        let url = match &self.url {
            UrlTemplate::Literal(text) => text.clone(),
            UrlTemplate::Whole(name) => format!("${{{name}}}"),
        };
        let headers: serde_json::Map<String, Json> = self
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), json!(value)))
            .collect();
        let mut fields = vec![
            ("url", json!(url)),
            ("method", json!(self.method.as_str())),
            ("headers", Json::Object(headers)),
        ];
        if let Some(body) = &self.body {
            fields.push(("body", body.clone()));
        }
        if let Some(port) = self.callback_port {
            fields.push(("callback_port", json!(port)));
        }
        if self.awaits_callback() {
            fields.push(("on_timeout", json!(self.on_timeout.as_str())));
        }
        fields
    }

    /// The template names the url, headers and body use, lower-cased, each once.
    pub fn references(&self) -> Vec<String> {
        let mut names = match &self.url {
            UrlTemplate::Literal(text) => crate::template::references(text),
            UrlTemplate::Whole(name) => vec![name.clone()],
        };
        for (_, value) in &self.headers {
            names.extend(crate::template::references(value));
        }
        names.extend(crate::template::json_references(&self.body));
        names.sort();
        names.dedup();
        names
    }

    /// Whether it waits for a callback: it names `${callback_url}` (docs/EVENTS.md §4.3).
    pub fn awaits_callback(&self) -> bool {
        self.references().iter().any(|n| n == "callback_url")
    }

    /// Its `timeout` when the hook gives none (rule 1).
    pub fn default_timeout(&self) -> Duration {
        if self.awaits_callback() {
            DEFAULT_CALLBACK_TIMEOUT
        } else {
            DEFAULT_WEBHOOK_TIMEOUT
        }
    }
}

/// Rule 2 at load, and rule 3 on a written-out scheme and host.
pub fn parse_url(text: &str) -> Result<UrlTemplate, WebhookFieldError> {
    let text = text.trim();
    if let Some(name) = lone_reference(text) {
        return Ok(UrlTemplate::Whole(name));
    }
    let host_end = url_policy::authority_end(text).ok_or_else(|| WebhookFieldError::UrlSyntax {
        url: text.to_owned(),
        reason: "no scheme".to_owned(),
    })?;
    let base = &text[..host_end];
    if base.contains("${") {
        return Err(WebhookFieldError::UrlHost {
            url: text.to_owned(),
        });
    }
    let parsed = url::Url::parse(base).map_err(|err| WebhookFieldError::UrlSyntax {
        url: text.to_owned(),
        reason: err.to_string(),
    })?;
    url_policy::check_literal(&parsed).map_err(WebhookFieldError::UrlPolicy)?;
    if crate::template::references(text).is_empty() {
        // Fully written out: the whole of it must parse now, not at the first event.
        url::Url::parse(text).map_err(|err| WebhookFieldError::UrlSyntax {
            url: text.to_owned(),
            reason: err.to_string(),
        })?;
    }
    Ok(UrlTemplate::Literal(text.to_owned()))
}

/// The name of a text that is exactly one `${name}`.
pub fn lone_reference(text: &str) -> Option<String> {
    match crate::template::references(text).as_slice() {
        [name] if text.len() == name.len() + 3 && text.starts_with("${") && text.ends_with('}') => {
            Some(name.clone())
        }
        _ => None,
    }
}

/// Whether `secrets.env` or this process's environment defines `name` (case-insensitively), for
/// `check`'s warning about names no webhook run can resolve. The file is read leniently here:
/// a refused file is the run's error to report.
pub fn is_defined_secret(name: &str) -> bool {
    crate::secrets::names()
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name))
        || crate::secrets::environment_value(name).is_some()
}

/// `headers:` from its JSON text: a mapping of token names to scalar values (rule 4).
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, WebhookFieldError> {
    let Ok(Json::Object(map)) = serde_json::from_str::<Json>(text) else {
        return Err(WebhookFieldError::Headers);
    };
    let mut headers = Vec::with_capacity(map.len());
    for (name, value) in map {
        let is_token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !is_token {
            return Err(WebhookFieldError::HeaderName {
                name,
                why: "is no header name; use letters, digits and - only",
            });
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(WebhookFieldError::HeaderName {
                name,
                why: "is set by hookvisor or the connection; drop it",
            });
        }
        let value = match value {
            Json::String(text) => text,
            Json::Number(n) => n.to_string(),
            Json::Bool(b) => b.to_string(),
            _ => return Err(WebhookFieldError::Headers),
        };
        headers.push((name, value));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn webhook(pairs: &[(&str, &str)]) -> Result<Webhook, WebhookFieldError> {
        let map: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        Webhook::from_fields(|k| map.get(k).copied(), true)
    }

    #[test]
    fn fields_and_defaults() {
        let w = webhook(&[("url", "https://example.com/hook")]).unwrap();
        assert_eq!(
            w.url,
            UrlTemplate::Literal("https://example.com/hook".into())
        );
        assert_eq!(
            (w.method, w.body.as_ref(), w.callback_port),
            (Method::Post, None, None)
        );
        assert_eq!(w.default_timeout(), DEFAULT_WEBHOOK_TIMEOUT);
        let w = webhook(&[
            ("url", "${SLACK_URL}"),
            ("method", "put"),
            ("headers", r#"{"Authorization":"Bearer ${TOKEN}","X-N":3}"#),
            (
                "body",
                r#"{"files":"${files}","cb":"${callback_url}","n":1}"#,
            ),
            ("callback_port", "8765"),
        ])
        .unwrap();
        assert_eq!(w.url, UrlTemplate::Whole("slack_url".into()));
        assert_eq!(w.method, Method::Put);
        assert_eq!(w.headers[1], ("X-N".to_owned(), "3".to_owned()));
        assert_eq!(w.callback_port, Some(8765));
        assert_eq!(
            w.references(),
            ["callback_url", "files", "slack_url", "token"]
        );
        assert_eq!(w.default_timeout(), DEFAULT_CALLBACK_TIMEOUT);
        assert_eq!(w.on_timeout, OnTimeout::Abort);
        let shown: Json = w
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(shown["url"], json!("${slack_url}"));
        assert_eq!(shown["headers"]["Authorization"], json!("Bearer ${TOKEN}"));
        assert_eq!(shown["on_timeout"], json!("abort"));
        let w = webhook(&[
            ("url", "https://h/approve?cb=${callback_url}"),
            ("on_timeout", "continue"),
        ])
        .unwrap();
        assert_eq!(w.on_timeout, OnTimeout::Continue);
        // A webhook that awaits nothing shows no on_timeout.
        let plain = webhook(&[("url", "https://h/x")]).unwrap();
        assert!(plain.fields().iter().all(|(k, _)| *k != "on_timeout"));
        // A body that is no JSON text (read flat) is a string; JSON text keeps its type.
        let w = webhook(&[("url", "http://127.0.0.1:9/x"), ("body", "hello")]).unwrap();
        assert_eq!(w.body, Some(json!("hello")));
        let w = webhook(&[
            ("url", "http://localhost/${task_id}?q=${x}"),
            ("body", "[1]"),
        ]);
        assert_eq!(w.unwrap().body, Some(json!([1])));
    }

    #[test]
    fn refusals_name_their_field() {
        // (fields, the field the refusal names)
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let table: &[Case<'_>] = &[
            (&[], None),
            (&[("url", "https://${host}/x")], Some("url")),
            (&[("url", "${scheme}://h/x")], Some("url")),
            (&[("url", "https://h:${port}/x")], Some("url")),
            (&[("url", "${a}${b}")], Some("url")),
            (&[("url", "example.com/x")], Some("url")),
            (&[("url", "http://example.com/x")], Some("url")),
            (&[("url", "http://10.0.0.1/x")], Some("url")),
            (&[("url", "ftp://localhost/x")], Some("url")),
            (
                &[("url", "https://h/x"), ("method", "TRACE")],
                Some("method"),
            ),
            (
                &[("url", "https://h/x"), ("headers", "[1]")],
                Some("headers"),
            ),
            (
                &[("url", "https://h/x"), ("headers", r#"{"A B":"x"}"#)],
                Some("headers"),
            ),
            (
                &[("url", "https://h/x"), ("headers", r#"{"Host":"x"}"#)],
                Some("headers"),
            ),
            (
                &[("url", "https://h/x"), ("headers", r#"{"A":{"b":1}}"#)],
                Some("headers"),
            ),
            (
                &[("url", "https://h/x"), ("method", "GET"), ("body", "{}")],
                Some("body"),
            ),
            (
                &[
                    ("url", "https://h/${callback_url}"),
                    ("on_timeout", "retry"),
                ],
                Some("on_timeout"),
            ),
            // Nothing to time out waiting for.
            (
                &[("url", "https://h/x"), ("on_timeout", "continue")],
                Some("on_timeout"),
            ),
            (
                &[("url", "https://h/x"), ("callback_port", "0")],
                Some("callback_port"),
            ),
            (
                &[("url", "https://h/x"), ("callback_port", "70000")],
                Some("callback_port"),
            ),
            (&[("url", "https://h/x"), ("run", "x")], Some("run")),
        ];
        for (pairs, key) in table {
            let err = webhook(pairs).unwrap_err();
            assert_eq!(err.key(), *key, "{pairs:?}: {err}");
        }
        let err = webhook(&[("url", "http://example.com/x")]).unwrap_err();
        assert!(err.to_string().contains("https"), "{err}");
        let script = Webhook::from_fields(|_| None, false).unwrap_err();
        assert_eq!(script, WebhookFieldError::NotDeclarative);
    }

    #[test]
    fn loopback_http_loads() {
        for url in [
            "http://127.0.0.1:8080/x",
            "http://127.9.9.9/",
            "http://[::1]:1/x",
            "http://localhost/x",
            "http://LOCALHOST:3/x",
            "https://example.com",
        ] {
            assert!(webhook(&[("url", url)]).is_ok(), "{url}");
        }
    }
}
