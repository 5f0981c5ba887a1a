//! One run of a webhook hook: expand, deliver, and the log and outcome of rule 7.

use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::deliver::{self, DELIVERY_HEADER, Delivery, status_line};
use super::{UrlTemplate, Webhook, expand};
use crate::context::Context;
use crate::event::HookAction;
use crate::exec::{CancelToken, Captured, ExecError, RunOutcome};
use crate::hook::Hook;
use crate::payload::Payload;

/// Each attempt's limit (EVENTS.md §4.3, §5 rule 22).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Every secret form is masked, however short (an `ab` garbles the text, but leaking it would
/// be worse); only an empty one, which hides nothing, is not.
const MIN_MASKED: usize = 1;

/// How a webhook run ended, as the dispatcher records it.
pub(crate) enum WebhookRun {
    /// It was sent (or every attempt failed, or a cancel stopped it).
    Finished(RunOutcome),
    /// Refused before sending, by a value of the event or the secrets: the same firing fails
    /// the same way, so it is never re-run.
    Refused(String),
}

/// Runs the hook's webhook action with the event's `payload`; `None` when its action is none.
pub(crate) fn run(
    ctx: &Context,
    hook: &Hook,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Option<WebhookRun>, ExecError> {
    let HookAction::Webhook(action) = &hook.spec.action else {
        return Ok(None);
    };
    // The seam of awaited webhooks (EVENTS.md §4.3): the callback listener hands the URL it
    // serves for this run here. It is not built yet, so a `${callback_url}` fails as a name
    // this event lacks.
    let callback_url: Option<&str> = None;
    Ok(Some(send(
        ctx,
        hook,
        action,
        payload,
        callback_url,
        cancel,
    )?))
}

/// Expands the templates, delivers, and writes the log.
fn send(
    ctx: &Context,
    hook: &Hook,
    action: &Webhook,
    payload: &Payload,
    callback_url: Option<&str>,
    cancel: &CancelToken,
) -> Result<WebhookRun, ExecError> {
    let request = match expand::expand(action, payload, callback_url) {
        Ok(request) => request,
        Err(err) => return Ok(WebhookRun::Refused(err.to_string())),
    };
    let id = match deliver::delivery_id() {
        Ok(id) => id,
        Err(message) => return Ok(WebhookRun::Refused(format!("webhook: {message}"))),
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
        stdout = mask(&answer.body, &request.secrets);
    }
    let mut text = mask(log.as_bytes(), &request.secrets);
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
            mask(line.as_bytes(), &request.secrets)
        })
        .unwrap_or_default();
    text.extend_from_slice(&stderr);
    let path = ctx.log_path(&hook.id);
    crate::exec::write_whole_log(&path, &text).map_err(|source| ExecError::Log { path, source })?;
    Ok(WebhookRun::Finished(RunOutcome {
        exit_code,
        timed_out: false,
        cancelled,
        duration: started.elapsed(),
        tail: String::from_utf8_lossy(&text).into_owned(),
        output_bytes: text.len() as u64,
        log_truncated: false,
        captured: Some(Captured {
            stdout,
            stderr,
            stdout_truncated: answer.is_some_and(|a| a.truncated),
            stderr_truncated: false,
        }),
    }))
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
