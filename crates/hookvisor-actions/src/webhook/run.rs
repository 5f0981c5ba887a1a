//! One run of a webhook hook: expand, deliver, and the log and outcome of rule 7.

use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::deliver::{self, DELIVERY_HEADER, Delivery, status_line};
use crate::callback::Pending;
use hookvisor_core::context::Context;
use hookvisor_core::event::HookAction;
use hookvisor_core::exec::{CancelToken, Captured, ExecError, RunOutcome};
use hookvisor_core::hook::Hook;
use hookvisor_core::payload::Payload;
use hookvisor_core::runner::Ran;
use hookvisor_core::webhook::{UrlTemplate, Webhook};

use super::expand;

/// Each attempt's limit (docs/EVENTS.md §4.3, §5 rule 22).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Every secret form is masked, however short (an `ab` garbles the text, but leaking it would
/// be worse); only an empty one, which hides nothing, is not.
const MIN_MASKED: usize = 1;

/// Runs the hook's webhook action with the event's `payload`; `None` when its action is none.
pub(crate) fn run(
    ctx: &Context,
    hook: &Hook,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Option<Ran>, ExecError> {
    let HookAction::Webhook(action) = &hook.spec.action else {
        return Ok(None);
    };
    // A webhook that sends `${callback_url}` waits for its callback (rule 8).
    if action.awaits_callback() {
        return super::awaited::run(ctx, hook, action, payload, cancel).map(Some);
    }
    Ok(Some(match send(hook, action, payload, None, cancel) {
        Ok(sent) => Ran::Finished(sent.finish(ctx, hook)?.into()),
        Err(message) => Ran::Refused(message),
    }))
}

/// A delivery done: its outcome and log, not yet written (an awaited webhook adds its wait).
pub(super) struct Sent {
    /// The run's outcome as far as the delivery goes.
    pub(super) outcome: RunOutcome,
    /// The log text, masked.
    pub(super) log: Vec<u8>,
    /// Whether the receiver took it (a 2xx).
    pub(super) delivered: bool,
    /// The secret values the request used, for masking what is added to the log later.
    pub(super) secrets: Vec<String>,
}

impl Sent {
    /// Writes the log and hands the outcome on.
    pub(super) fn finish(mut self, ctx: &Context, hook: &Hook) -> Result<RunOutcome, ExecError> {
        let path = ctx.log_path(&hook.id);
        hookvisor_core::exec::write_whole_log(&path, &self.log)
            .map_err(|source| ExecError::Log { path, source })?;
        self.outcome.tail = String::from_utf8_lossy(&self.log).into_owned();
        self.outcome.output_bytes = self.log.len() as u64;
        Ok(self.outcome)
    }

    /// Adds `text` to the log, its secrets masked.
    pub(super) fn note(&mut self, text: &str) {
        self.log
            .extend_from_slice(&mask(text.as_bytes(), &self.secrets));
        if !self.log.ends_with(b"\n") {
            self.log.push(b'\n');
        }
    }
}

/// Expands the templates and delivers: the outcome and the log, or why it was refused before
/// sending (an error of the event's values: the same firing fails the same way). `callback` is
/// the wait of an awaited webhook, whose URL is `${callback_url}`.
pub(super) fn send(
    hook: &Hook,
    action: &Webhook,
    payload: &Payload,
    callback: Option<&Pending>,
    cancel: &CancelToken,
) -> Result<Sent, String> {
    let callback_url = callback.map(Pending::url);
    let request = match expand::expand(action, payload, callback_url) {
        Ok(request) => request,
        Err(err) => return Err(err.to_string()),
    };
    // Masked like a secret: a receiver that echoes the request (a chat API returning the
    // message) would otherwise put the token, the power to approve, in the agent's state dir.
    let mut masked = request.secrets.clone();
    masked.extend(callback.map(|pending| pending.token().to_owned()));
    let id = match deliver::delivery_id() {
        Ok(id) => id,
        Err(message) => return Err(format!("webhook: {message}")),
    };
    // The hook's `timeout` bounds the callback wait of an awaited webhook; otherwise a shorter
    // one bounds each attempt too.
    let per_attempt = if callback_url.is_some() {
        ATTEMPT_TIMEOUT
    } else {
        hook.timeout.clamp(Duration::from_secs(1), ATTEMPT_TIMEOUT)
    };
    let started = Instant::now();
    let mut log = templates(action);
    log.push_str(&format!("{DELIVERY_HEADER}: {id}\n"));
    let request = std::sync::Arc::new(request);
    let delivery = deliver::deliver(request.clone(), &id, per_attempt, cancel, &mut |line| {
        log.push_str(&line);
        log.push('\n');
    });
    let (exit_code, cancelled, answer, failure) = match delivery {
        Delivery::Delivered(answer) => (0, false, Some(answer), None),
        Delivery::Failed(message, answer) => (1, false, answer, Some(message)),
        Delivery::Cancelled => (1, true, None, Some("cancelled".to_owned())),
    };
    let mut stdout = Vec::new();
    if let Some(answer) = &answer {
        log.push_str(&format!(
            "response ({}, {} bytes{}):\n",
            status_line(answer.status),
            answer.body.len(),
            if answer.truncated {
                ", the rest not read"
            } else {
                ""
            }
        ));
        stdout = mask(&answer.body, &masked);
    }
    let mut text = mask(log.as_bytes(), &masked);
    text.extend_from_slice(&stdout);
    if !stdout.is_empty() && !stdout.ends_with(b"\n") {
        text.push(b'\n');
    }
    let stderr = failure
        .map(|message| {
            let line = format!(
                "webhook: {} {} failed: {message}\n",
                action.method.as_str(),
                url_template(action)
            );
            mask(line.as_bytes(), &masked)
        })
        .unwrap_or_default();
    text.extend_from_slice(&stderr);
    Ok(Sent {
        outcome: RunOutcome {
            exit_code,
            cancelled,
            duration: started.elapsed(),
            captured: Some(Captured {
                stdout,
                stderr,
                stdout_truncated: answer.as_ref().is_some_and(|a| a.truncated),
                stderr_truncated: false,
            }),
            ..RunOutcome::default()
        },
        log: text,
        delivered: exit_code == 0,
        secrets: masked,
    })
}

/// The URL as written.
fn url_template(action: &Webhook) -> String {
    match &action.url {
        UrlTemplate::Literal(text) => text.clone(),
        UrlTemplate::Whole(name) => format!("${{{name}}}"),
    }
}

/// The request as the hook writes it, placeholders and all (rule 7).
fn templates(action: &Webhook) -> String {
    let mut text = format!(
        "webhook: {} {}\n",
        action.method.as_str(),
        url_template(action)
    );
    for (name, value) in &action.headers {
        text.push_str(&format!("  {name}: {value}\n"));
    }
    if let Some(body) = &action.body {
        let shown = match body {
            Json::String(text) => text.clone(),
            other => other.to_string(),
        };
        text.push_str(&format!("  body: {shown}\n"));
    }
    text
}

/// `bytes` with every secret value of [`MIN_MASKED`] bytes or more replaced by `[secret]`.
fn mask(bytes: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for secret in secrets.iter().filter(|s| s.len() >= MIN_MASKED) {
        let needle = secret.as_bytes();
        let mut masked = Vec::with_capacity(out.len());
        let mut rest = &out[..];
        while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
            masked.extend_from_slice(&rest[..at]);
            masked.extend_from_slice(b"[secret]");
            rest = &rest[at + needle.len()..];
        }
        masked.extend_from_slice(rest);
        out = masked;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        let secrets = ["s3cr3t".to_owned(), "ab".to_owned()];
        assert_eq!(
            mask(b"x s3cr3ts3cr3t ab y", &secrets),
            b"x [secret][secret] [secret] y".to_vec()
        );
        assert_eq!(mask(b"", &secrets), b"".to_vec());
    }
}
