//! Rules 2, 4, 5 and 8 of the module: a webhook's url, headers and body with every name
//! resolved, as the request to send.

use std::ffi::OsStr;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::Value as Json;
use url::Url;

use super::secret_hosts::{self, Refusal};
use hookvisor_core::payload::{Payload, is_known_name};
use hookvisor_core::secrets::{Secrets, SecretsError};
use hookvisor_core::template::Value;
use hookvisor_core::template::names::{Piece, Pieces};
use hookvisor_core::webhook::url_policy::{self, UrlPolicyError};
use hookvisor_core::webhook::{Method, UrlTemplate, Webhook, lone_reference};
use hookvisor_core::when;

/// What a placeholder after the host may leave unencoded: RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Nesting deeper than YAML front matter can usefully say is refused, not recursed into.
const MAX_NESTING: usize = 32;

/// The request a webhook's templates expand to.
#[derive(Debug)]
pub(crate) struct Request {
    /// The method.
    pub(crate) method: Method,
    /// The URL, policy-checked.
    pub(crate) url: Url,
    /// The headers, values checked.
    pub(crate) headers: Vec<(String, String)>,
    /// The body, serialized once.
    pub(crate) body: Option<Vec<u8>>,
    /// Every secret value used, to mask wherever text is written.
    pub(crate) secrets: Vec<String>,
}

/// Why the templates do not expand; the run fails with this message, which never holds a
/// resolved value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ExpandError {
    /// A name hookvisor sets for some events, not this one (rule 5).
    #[error(
        "webhook: {field}: ${{{name}}} is no variable of this event; fix the name, or pass it \
         with --data"
    )]
    NotInEvent {
        /// Where: `url`, `headers: NAME`, `body`.
        field: String,
        /// The name.
        name: String,
    },
    /// A name found nowhere (rule 5).
    #[error(
        "webhook: {field}: ${{{name}}} is no variable of this event, and neither secrets.env nor \
         hookvisor's environment has {upper}; add '{upper}=…' to ~/.config/hookvisor/secrets.env \
         (mode 600) or fix the name"
    )]
    Unknown {
        /// Where.
        field: String,
        /// The name.
        name: String,
        /// The name as a variable is usually written.
        upper: String,
    },
    /// The secrets file is refused.
    #[error("webhook: {0}")]
    Secrets(SecretsError),
    /// A header value holds a byte that would end or break the header (rule 4).
    #[error(
        "webhook: headers: {header}: the expanded value holds a {what}, which no header may \
         hold; fix the value or move it into the body"
    )]
    HeaderControl {
        /// The header.
        header: String,
        /// `CR`, `LF`, `NUL` or `control character`.
        what: &'static str,
    },
    /// The expanded URL does not parse.
    #[error("webhook: url: '{template}' expands to no URL ({reason}); check the value it names")]
    UrlSyntax {
        /// The URL template.
        template: String,
        /// What the parser said.
        reason: String,
    },
    /// The expanded URL breaks the policy (rule 3).
    #[error("webhook: url: {0}")]
    Policy(UrlPolicyError),
    /// A secret would go to a URL that something less trusted than its source chose (rule 5).
    #[error(
        "webhook: {field}: ${{{secret}}} is a secret, and the url is ${{{url}}} from {chooser}; \
         a secret goes only to a url the hook or secrets.env writes: put the url in \
         secrets.env or write its host out"
    )]
    SecretToChosenUrl {
        /// Where the secret is used.
        field: String,
        /// The secret's name.
        secret: String,
        /// The URL's variable.
        url: String,
        /// `the event` or `hookvisor's environment`.
        chooser: &'static str,
    },
    /// A secret would go to a host its `NAME_HOSTS` does not list (rule 8).
    #[error("webhook: {field}: ${{{name}}} is a secret and may not go to {host}: {why}; {fix}")]
    SecretHost {
        /// Where the secret is used.
        field: String,
        /// The secret's name.
        name: String,
        /// The host (with the port for loopback), as `NAME_HOSTS` would list it.
        host: String,
        /// What `NAME_HOSTS` lacks.
        why: String,
        /// The line to add.
        fix: String,
    },
    /// A name of the event's data is also a secrets.env name (rule 5): which one the hook
    /// meant cannot be told, and the data may come from the agent.
    #[error(
        "webhook: {field}: ${{{name}}} is both a key of the event's data and {upper} in \
         secrets.env; rename the data key or the secret, so neither replaces the other"
    )]
    DataShadowsSecret {
        /// Where.
        field: String,
        /// The name.
        name: String,
        /// The secrets.env spelling.
        upper: String,
    },
    /// A url placeholder makes a `.` or `..` path segment, which the URL parser would resolve
    /// by moving up the path (rule 2).
    #[error(
        "webhook: url: ${{{name}}} makes a '.' or '..' (or %2e) segment, which would move the \
         request up the url's path; fix the value"
    )]
    DotSegment {
        /// The placeholder.
        name: String,
    },
    /// The body nests too deeply.
    #[error("webhook: body: nested over 32 levels; flatten it")]
    TooDeep,
}

/// Where a name's value comes from (rule 5).
enum Source {
    /// The event (or the caller's `callback_url`).
    Event,
    /// `secrets.env` or hookvisor's environment: this text.
    Secret(String),
}

/// A secret one run used.
struct Used {
    /// Its name.
    name: String,
    /// Where: `url`, `headers: NAME`, `body`.
    field: String,
    /// Its value, for masking.
    value: String,
    /// From `secrets.env` (else hookvisor's environment).
    from_file: bool,
    /// Its `NAME_HOSTS` from the same place (rule 8).
    hosts: Option<String>,
}

/// The names of one run, resolved by rule 5.
struct Names<'a> {
    payload: &'a Payload,
    callback_url: Option<&'a str>,
    /// Read at the first name that needs it.
    secrets: Option<Secrets>,
    /// The secrets used, for masking and rule 5's host check.
    used: Vec<Used>,
}

impl Names<'_> {
    /// Where `name`, used in `field`, comes from.
    fn source(&mut self, name: &str, field: &str) -> Result<Source, ExpandError> {
        // Only the caller's listener says where a callback goes, never the event's data.
        let from_event = match name {
            "callback_url" => self.callback_url.is_some(),
            _ => self.payload.template_value(name).is_some(),
        };
        if from_event {
            if name != "callback_url"
                && !is_known_name(name)
                && !name.contains('.')
                && self.secrets()?.get(name).is_some()
            {
                return Err(ExpandError::DataShadowsSecret {
                    field: field.to_owned(),
                    name: name.to_owned(),
                    upper: name.to_ascii_uppercase(),
                });
            }
            return Ok(Source::Event);
        }
        if is_known_name(name) {
            return Err(ExpandError::NotInEvent {
                field: field.to_owned(),
                name: name.to_owned(),
            });
        }
        let upper = name.to_ascii_uppercase();
        if !name.contains('.') {
            let secrets = self.secrets()?;
            let hosts_name = format!("{upper}_HOSTS");
            let (value, hosts, from_file) = match secrets.get(name) {
                Some(value) => (
                    Some(value.to_owned()),
                    secrets.get(&hosts_name).map(str::to_owned),
                    true,
                ),
                None => (
                    hookvisor_core::secrets::environment_value(name),
                    hookvisor_core::secrets::environment_value(&hosts_name),
                    false,
                ),
            };
            if let Some(value) = value {
                self.used.push(Used {
                    name: name.to_owned(),
                    field: field.to_owned(),
                    value: value.clone(),
                    from_file,
                    hosts,
                });
                return Ok(Source::Secret(value));
            }
        }
        Err(ExpandError::Unknown {
            field: field.to_owned(),
            name: name.to_owned(),
            upper,
        })
    }

    /// secrets.env, read at the first name that needs it.
    fn secrets(&mut self) -> Result<&Secrets, ExpandError> {
        if self.secrets.is_none() {
            self.secrets = Some(Secrets::load().map_err(ExpandError::Secrets)?);
        }
        Ok(self.secrets.get_or_insert_default())
    }

    /// A written-out url with each value percent-encoded (rule 2). A value that is `.` or
    /// `..`, or that makes a path segment one once decoded (`%2e`, which WHATWG treats as a
    /// dot), is refused: the parser would resolve it by climbing the path.
    fn literal_url(&mut self, text: &str) -> Result<String, ExpandError> {
        let mut out = String::with_capacity(text.len());
        // Where each value went in `out`, and its name.
        let mut placed = Vec::new();
        for piece in Pieces::new(text) {
            match piece {
                Piece::Literal(literal) => out.push_str(literal),
                Piece::Reference(name) => {
                    let value = self.text(&name, "url")?;
                    if value == "." || value == ".." {
                        return Err(ExpandError::DotSegment { name });
                    }
                    let start = out.len();
                    out.extend(utf8_percent_encode(&value, UNRESERVED));
                    placed.push((start, out.len(), name));
                }
            }
        }
        // Values are encoded, so the path ends where the written text puts a `?` or `#`.
        let host_end = url_policy::authority_end(&out).unwrap_or(out.len());
        let path_end = out[host_end..]
            .find(['?', '#'])
            .map_or(out.len(), |at| host_end + at);
        let mut start = host_end;
        // `\` separates segments too in an http(s) URL.
        for segment in out[host_end..path_end].split(['/', '\\']) {
            let end = start + segment.len();
            let decoded = percent_decode_str(segment).decode_utf8_lossy();
            let touching = placed.iter().find(|(s, e, _)| *s <= end && *e >= start);
            if let Some((_, _, name)) = touching.filter(|_| decoded == "." || decoded == "..") {
                return Err(ExpandError::DotSegment { name: name.clone() });
            }
            start = end + 1;
        }
        Ok(out)
    }

    /// The text of `name`, as argv renders it: a list joined by spaces.
    fn text(&mut self, name: &str, field: &str) -> Result<String, ExpandError> {
        Ok(match self.source(name, field)? {
            Source::Secret(value) => value,
            Source::Event if name == "callback_url" && self.callback_url.is_some() => {
                self.callback_url.unwrap_or_default().to_owned()
            }
            Source::Event => match self.payload.template_value(name) {
                Some(Value::Scalar(value)) => value.to_string_lossy().into_owned(),
                Some(Value::List(items)) => items.join(OsStr::new(" ")).to_string_lossy().into(),
                None => String::new(),
            },
        })
    }

    /// The JSON value of a lone `${name}` in the body (rule 4).
    fn json(&mut self, name: &str, field: &str) -> Result<Json, ExpandError> {
        Ok(match self.source(name, field)? {
            Source::Secret(value) => Json::String(value),
            Source::Event if name == "callback_url" && self.callback_url.is_some() => {
                Json::String(self.callback_url.unwrap_or_default().to_owned())
            }
            Source::Event => {
                let path: Vec<&str> = name.split('.').collect();
                match self.payload.lookup(&path) {
                    Some(when::Value::Json(json)) => json,
                    Some(when::Value::Text(text)) if name == "iteration" => {
                        text.parse::<u64>().map_or(Json::String(text), Json::from)
                    }
                    Some(when::Value::Text(text)) => Json::String(text),
                    None => Json::Null,
                }
            }
        })
    }

    /// A text template with every placeholder replaced by `render` of its text.
    fn template(
        &mut self,
        text: &str,
        field: &str,
        render: impl Fn(&str) -> String,
    ) -> Result<String, ExpandError> {
        let mut out = String::with_capacity(text.len());
        for piece in Pieces::new(text) {
            match piece {
                Piece::Literal(literal) => out.push_str(literal),
                Piece::Reference(name) => out.push_str(&render(&self.text(&name, field)?)),
            }
        }
        Ok(out)
    }

    /// A body value with its strings expanded (rule 4).
    fn body(&mut self, json: &Json, depth: usize) -> Result<Json, ExpandError> {
        if depth > MAX_NESTING {
            return Err(ExpandError::TooDeep);
        }
        Ok(match json {
            Json::String(text) => match lone_reference(text) {
                Some(name) => self.json(&name, "body")?,
                None => Json::String(self.template(text, "body", str::to_owned)?),
            },
            Json::Array(items) => Json::Array(
                items
                    .iter()
                    .map(|i| self.body(i, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Json::Object(map) => Json::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.body(v, depth + 1)?)))
                    .collect::<Result<_, ExpandError>>()?,
            ),
            other => other.clone(),
        })
    }
}

/// The request `webhook` makes for `payload`; `callback_url` is the awaited callback's URL
/// when the caller hosts one.
pub(crate) fn expand(
    webhook: &Webhook,
    payload: &Payload,
    callback_url: Option<&str>,
) -> Result<Request, ExpandError> {
    let mut names = Names {
        payload,
        callback_url,
        secrets: None,
        used: Vec::new(),
    };
    let (url_text, url_chosen_by) = match &webhook.url {
        UrlTemplate::Whole(name) => {
            let secrets_before = names.used.len();
            let text = names.text(name, "url")?;
            // Who chose the url: the event, hookvisor's environment, or secrets.env.
            let chooser = match names.used.get(secrets_before) {
                None => Some("the event"),
                Some(used) if !used.from_file => Some("hookvisor's environment"),
                Some(_) => None,
            };
            (text, chooser.map(|chooser| (name.clone(), chooser)))
        }
        UrlTemplate::Literal(text) => (names.literal_url(text)?, None),
    };
    let template = match &webhook.url {
        UrlTemplate::Whole(name) => format!("${{{name}}}"),
        UrlTemplate::Literal(text) => text.clone(),
    };
    let url = Url::parse(url_text.trim()).map_err(|err| ExpandError::UrlSyntax {
        template,
        reason: err.to_string(),
    })?;
    url_policy::check_at_send(&url).map_err(ExpandError::Policy)?;

    let mut headers = Vec::with_capacity(webhook.headers.len());
    for (name, value) in &webhook.headers {
        let field = format!("headers: {name}");
        let value = names.template(value, &field, str::to_owned)?;
        if let Some(what) = control_byte(&value) {
            return Err(ExpandError::HeaderControl {
                header: name.clone(),
                what,
            });
        }
        headers.push((name.clone(), value));
    }
    let body = match &webhook.body {
        None => None,
        Some(template) => {
            let json = names.body(template, 0)?;
            Some(serde_json::to_vec(&json).unwrap_or_default())
        }
    };
    // Rule 5: an event-chosen url gets no secret, an environment-chosen one none of the file's.
    if let Some((url, chooser)) = url_chosen_by {
        let from_event = chooser == "the event";
        if let Some(used) = names
            .used
            .iter()
            .find(|u| u.field != "url" && (from_event || u.from_file))
        {
            return Err(ExpandError::SecretToChosenUrl {
                field: used.field.clone(),
                secret: used.name.clone(),
                url,
                chooser,
            });
        }
    }
    // Rule 8: each secret only to a host its NAME_HOSTS lists. A whole-url secret's own
    // value is exempt: it is the destination.
    let own = match &webhook.url {
        UrlTemplate::Whole(name) => Some(name.as_str()),
        UrlTemplate::Literal(_) => None,
    };
    for used in &names.used {
        if own.is_some_and(|own| own.eq_ignore_ascii_case(&used.name)) {
            continue;
        }
        if let Err(refusal) = secret_hosts::check(used.hosts.as_deref(), &url) {
            return Err(host_refused(used, refusal, &url));
        }
    }
    let secrets = masked_forms(&names.used, own.map(|_| &url));
    Ok(Request {
        method: webhook.method,
        url,
        headers,
        body,
        secrets,
    })
}

/// The run's error for a secret `refusal` keeps from `url`, with the line that allows it.
fn host_refused(used: &Used, refusal: Refusal, url: &Url) -> ExpandError {
    let list = format!("{}_HOSTS", used.name.to_ascii_uppercase());
    let host = secret_hosts::entry_for(url);
    let (whence, fix) = if used.from_file {
        (
            "secrets.env",
            format!("add {list}={host} to ~/.config/hookvisor/secrets.env"),
        )
    } else {
        (
            "hookvisor's environment",
            format!(
                "set {list}={host} in hookvisor's environment, or move {} and {list}={host} \
                 into ~/.config/hookvisor/secrets.env",
                used.name.to_ascii_uppercase()
            ),
        )
    };
    let (why, fix) = match refusal {
        Refusal::Unlisted => (format!("{whence} has no {list}"), fix),
        Refusal::NotListed => (format!("{list} in {whence} does not list it"), fix),
        Refusal::BadEntry(entry) => (
            format!("{list} in {whence} holds '{entry}', which is no host"),
            "write host, host:port or *.example.com, comma-separated".to_owned(),
        ),
    };
    ExpandError::SecretHost {
        field: used.field.clone(),
        name: used.name.clone(),
        host,
        why,
        fix,
    }
}

/// Every text to mask in what the run writes (rule 7): each secret as sent (raw,
/// percent-encoded in the url, JSON-escaped in the body) and in base64 (at each of the three
/// alignments it may have inside a longer encoded text, as in Basic auth), and the path and
/// query of a url that is a secret (`own`). Longest first, so a longer form is masked whole.
fn masked_forms(used: &[Used], own: Option<&Url>) -> Vec<String> {
    use base64::Engine as _;
    let mut forms = Vec::new();
    for value in used.iter().map(|u| u.value.as_str()) {
        forms.push(value.to_owned());
        forms.push(utf8_percent_encode(value, UNRESERVED).to_string());
        let json = serde_json::to_string(value).unwrap_or_default();
        forms.push(json.trim_matches('"').to_owned());
        for shift in 0..3 {
            let mut bytes = vec![0; shift];
            bytes.extend_from_slice(value.as_bytes());
            // Only the characters that hold nothing but bits of the value.
            let (first, end) = ((8 * shift).div_ceil(6), 8 * bytes.len() / 6);
            for engine in [
                base64::engine::general_purpose::STANDARD_NO_PAD,
                base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ] {
                if let Some(core) = engine.encode(&bytes).get(first..end) {
                    forms.push(core.to_owned());
                }
            }
        }
    }
    if let Some(url) = own.filter(|_| used.iter().any(|u| u.field == "url")) {
        forms.extend(Some(url.path()).filter(|p| p.len() > 1).map(str::to_owned));
        forms.extend(url.query().map(str::to_owned));
    }
    forms.retain(|f| !f.is_empty());
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    forms
}

/// The name of the first byte no header value may hold: CR and LF end it, NUL ends it for
/// many servers, other control characters are invalid (tab is allowed).
fn control_byte(value: &str) -> Option<&'static str> {
    value.bytes().find_map(|b| match b {
        b'\r' => Some("CR"),
        b'\n' => Some("LF"),
        0 => Some("NUL"),
        b'\t' => None,
        0x01..=0x1f | 0x7f => Some("control character"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload() -> Payload {
        Payload::new("task.complete", "s1", "/w", "user")
            .iteration(4)
            .files(["a b.rs", "c.rs"])
            .data(
                json!({
                    "task_id": "t/1",
                    "n": 7,
                    "obj": {"k": [1, true]},
                    "evil": "\"quoted\"\nline $(touch x)",
                    "crlf": "a\r\nInjected: yes",
                    "target": "https://example.com/hook",
                })
                .as_object()
                .cloned()
                .unwrap_or_default(),
            )
    }

    fn webhook(url: &str, headers: &[(&str, &str)], body: Option<Json>) -> Webhook {
        Webhook {
            url: hookvisor_core::webhook::parse_url(url).unwrap(),
            method: Method::Post,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body,
            callback_port: None,
            on_timeout: hookvisor_core::policy::OnTimeout::Abort,
        }
    }

    #[test]
    fn body_values_keep_their_json_types() {
        let body = json!({
            "n": "${n}",
            "obj": "${obj}",
            "it": "${iteration}",
            "files": "${files}",
            "evil": "${evil}",
            "text": "task ${task_id} #${n} of ${files}",
            "nested": {"list": ["${n}", 2, null]},
            "cb": "${callback_url}",
            "${n}": "keys stay literal",
        });
        let hook = webhook("http://127.0.0.1:1/x", &[], Some(body));
        let request = expand(&hook, &payload(), Some("http://127.0.0.1:2/cb/t")).unwrap();
        let sent: Json = serde_json::from_slice(&request.body.unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({
                "n": 7,
                "obj": {"k": [1, true]},
                "it": 4,
                "files": ["a b.rs", "c.rs"],
                "evil": "\"quoted\"\nline $(touch x)",
                "text": "task t/1 #7 of a b.rs c.rs",
                "nested": {"list": [7, 2, null]},
                "cb": "http://127.0.0.1:2/cb/t",
                "${n}": "keys stay literal",
            })
        );
        assert!(request.secrets.is_empty());
    }

    #[test]
    fn url_values_are_percent_encoded_after_the_host() {
        let hook = webhook(
            "https://example.com/t/${task_id}?f=${files}&e=${evil}",
            &[],
            None,
        );
        let request = expand(&hook, &payload(), None).unwrap();
        assert_eq!(
            request.url.as_str(),
            "https://example.com/t/t%2F1?f=a%20b.rs%20c.rs&e=%22quoted%22%0Aline%20%24%28touch%20x%29"
        );
        let whole = webhook("${target}", &[], None);
        let request = expand(&whole, &payload(), None).unwrap();
        assert_eq!(request.url.as_str(), "https://example.com/hook");
    }

    #[test]
    fn the_policy_holds_at_send() {
        let payload = payload().data(
            json!({"plain": "http://example.com/x", "local": "http://127.0.0.1:9/x"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let err = expand(&webhook("${plain}", &[], None), &payload, None).unwrap_err();
        assert!(
            matches!(err, ExpandError::Policy(UrlPolicyError::Insecure { .. })),
            "{err}"
        );
        assert!(expand(&webhook("${local}", &[], None), &payload, None).is_ok());
    }

    #[test]
    fn headers_refuse_line_breaks_naming_the_header() {
        let hook = webhook("https://h/x", &[("X-Task", "id ${crlf}")], None);
        let err = expand(&hook, &payload(), None).unwrap_err().to_string();
        assert!(
            err.starts_with("webhook: headers: X-Task: the expanded value holds a CR"),
            "{err}"
        );
        assert!(
            !err.contains("Injected"),
            "the value stays out of the message: {err}"
        );
        assert_eq!(control_byte("a\tb"), None);
        assert_eq!(control_byte("a\0b"), Some("NUL"));
        assert_eq!(control_byte("a\x7fb"), Some("control character"));
    }

    #[test]
    fn no_value_makes_a_dot_segment() {
        let data = json!({"empty": "", "dot": ".", "dots": "..", "enc": "%2e"});
        let payload = payload().data(data.as_object().cloned().unwrap_or_default());
        for (url, name) in [
            ("https://h/a/${dots}/b", "dots"),
            ("https://h/a/${dot}", "dot"),
            ("https://h/a?q=${dots}", "dots"),
            // Decoded, `%2e` is a dot to the URL parser: with an empty value it is the segment.
            ("https://h/a/%2e${empty}/b", "empty"),
            ("https://h/a/${empty}%2E%2e", "empty"),
            ("https://h/a\\.${empty}/b", "empty"),
        ] {
            let err = expand(&webhook(url, &[], None), &payload, None).unwrap_err();
            assert!(
                matches!(&err, ExpandError::DotSegment { name: n } if n == name),
                "{url}: {err}"
            );
        }
        // Dots the hook writes itself are its own; a value is refused only as a whole dot.
        for url in [
            "https://h/a/${enc}/b",
            "https://h/a/x${enc}/../b",
            "https://h/.${empty}x",
        ] {
            let request = expand(&webhook(url, &[], None), &payload, None);
            assert!(request.is_ok(), "{url}");
        }
        let request = expand(&webhook("https://h/a/${enc}/b", &[], None), &payload, None);
        assert_eq!(request.unwrap().url.path(), "/a/%252e/b");
    }

    #[test]
    fn unknown_names_fail_naming_them() {
        let hook = webhook("https://h/${tool_name}", &[], None);
        let err = expand(&hook, &payload(), None).unwrap_err();
        assert!(
            matches!(&err, ExpandError::NotInEvent { name, .. } if name == "tool_name"),
            "{err}"
        );
        let hook = webhook("https://h/x", &[], Some(json!({"a": "${data.nope}"})));
        let err = expand(&hook, &payload(), None).unwrap_err();
        assert!(matches!(&err, ExpandError::NotInEvent { .. }), "{err}");
        let hook = webhook(
            "https://h/x",
            &[("A", "${hookvisor_test_surely_unset_name}")],
            None,
        );
        let err = expand(&hook, &payload(), None).unwrap_err().to_string();
        assert!(err.contains("HOOKVISOR_TEST_SURELY_UNSET_NAME"), "{err}");
        // `callback_url` is the caller's alone: without a callback it is no variable of this
        // event, whatever the event's data says.
        let hook = webhook("https://h/x", &[], Some(json!("${callback_url}")));
        let data = json!({"callback_url": "https://attacker.example/cb"});
        let payload = payload().data(data.as_object().cloned().unwrap_or_default());
        let err = expand(&hook, &payload, None).unwrap_err();
        assert!(matches!(&err, ExpandError::NotInEvent { name, .. } if name == "callback_url"));
        let request = expand(&hook, &payload, Some("http://127.0.0.1:7/cb/t")).unwrap();
        assert_eq!(request.body.unwrap(), br#""http://127.0.0.1:7/cb/t""#);
    }
}
