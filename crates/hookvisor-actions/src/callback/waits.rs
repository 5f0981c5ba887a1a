//! The table requests and waits meet in (rules 3 and 6): one mutex, so a token is taken by
//! exactly one request and a wait ends exactly once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Mutex, PoisonError};

use super::answer::Unreadable;
use super::token::TokenHash;
use super::{REVOKED_KEPT, Response};

/// The open waits and the recently ended tokens.
#[derive(Default)]
pub(super) struct Waits {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    open: HashMap<TokenHash, Open>,
    /// Ended tokens, for 410; `order` bounds them to [`REVOKED_KEPT`], oldest first out.
    revoked: HashSet<TokenHash>,
    order: VecDeque<TokenHash>,
}

struct Open {
    /// Set by the request that took the wait.
    taken: Option<Response>,
    /// The write end of the wait's pipe: a byte wakes [`super::Pending::wait`].
    wake: OwnedFd,
}

/// What became of a request's offer (rule 3).
#[derive(Debug, PartialEq)]
pub(super) enum Offer {
    /// It took the wait: 200.
    Taken,
    /// The wait was taken, timed out, cancelled or dropped: 410.
    Gone,
    /// No such token (or one ended too long ago): 404.
    Unknown,
    /// The wait is open but the request does not plainly answer: its status and reason; the
    /// wait stays open.
    Refused(Unreadable),
}

impl Waits {
    /// Opens a wait for a fresh token; `wake` is written when a request takes it.
    pub(super) fn open(&self, hash: TokenHash, wake: OwnedFd) {
        self.lock().open.insert(hash, Open { taken: None, wake });
    }

    /// A request for `hash` saying `answer` (already read, outside the lock): the first
    /// acceptable one takes the wait and revokes the token at once.
    pub(super) fn offer(&self, hash: TokenHash, answer: Result<Response, Unreadable>) -> Offer {
        let mut table = self.lock();
        let Some(open) = table.open.get_mut(&hash) else {
            return if table.revoked.contains(&hash) {
                Offer::Gone
            } else {
                Offer::Unknown
            };
        };
        if open.taken.is_some() {
            return Offer::Gone;
        }
        match answer {
            Err(reason) => Offer::Refused(reason),
            Ok(response) => {
                open.taken = Some(response);
                // The pipe is never drained: one byte keeps it readable, and EAGAIN on a full
                // pipe means it already is.
                let _ = nix::unistd::write(&open.wake, b"x");
                table.revoke(hash);
                Offer::Taken
            }
        }
    }

    /// The answer of a wait a request took, which ends it; `None` while it is open.
    pub(super) fn taken(&self, hash: TokenHash) -> Option<Response> {
        let mut table = self.lock();
        table.open.get(&hash)?.taken.as_ref()?;
        table.open.remove(&hash).and_then(|open| open.taken)
    }

    /// Ends a wait, whatever its state, revoking its token; returns the answer if a request
    /// took it. Ending an ended wait does nothing.
    pub(super) fn close(&self, hash: TokenHash) -> Option<Response> {
        let mut table = self.lock();
        let open = table.open.remove(&hash)?;
        table.revoke(hash);
        open.taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic while holding it leaves the table consistent: every change is one statement.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Table {
    fn revoke(&mut self, hash: TokenHash) {
        if self.revoked.insert(hash) {
            self.order.push_back(hash);
            if self.order.len() > REVOKED_KEPT
                && let Some(oldest) = self.order.pop_front()
            {
                self.revoked.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use nix::fcntl::OFlag;

    use super::super::Verdict;
    use super::super::token::Token;
    use super::*;

    fn response(message: &str) -> Response {
        Response {
            verdict: Verdict::Success,
            message: Some(message.into()),
            json: serde_json::Value::Null,
        }
    }

    fn opened(waits: &Waits) -> (TokenHash, OwnedFd) {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).unwrap();
        let hash = Token::new().unwrap().hash();
        waits.open(hash, write);
        (hash, read)
    }

    #[test]
    fn the_first_acceptable_offer_takes_the_wait_and_wakes_it() {
        let waits = Waits::default();
        let (hash, wake) = opened(&waits);
        assert_eq!(waits.taken(hash), None);
        assert_eq!(
            waits.offer(hash, Err(Unreadable::bad("unknown action"))),
            Offer::Refused(Unreadable::bad("unknown action"))
        );
        assert_eq!(waits.offer(hash, Ok(response("first"))), Offer::Taken);
        assert_eq!(waits.offer(hash, Ok(response("second"))), Offer::Gone);
        assert_eq!(nix::unistd::read(&wake, &mut [0u8; 4]).unwrap(), 1);
        assert_eq!(waits.taken(hash), Some(response("first")));
        // Ended: later requests are 410, and it is gone from the open waits.
        assert_eq!(waits.offer(hash, Ok(response("third"))), Offer::Gone);
        assert_eq!(waits.close(hash), None);
    }

    #[test]
    fn closing_revokes_and_returns_an_answer_that_came_first() {
        let waits = Waits::default();
        let (unanswered, _wake) = opened(&waits);
        assert_eq!(waits.close(unanswered), None);
        assert_eq!(waits.offer(unanswered, Ok(response("late"))), Offer::Gone);

        let (answered, _wake) = opened(&waits);
        assert_eq!(waits.offer(answered, Ok(response("in time"))), Offer::Taken);
        assert_eq!(waits.close(answered), Some(response("in time")));
    }

    #[test]
    fn an_unknown_token_is_unknown() {
        let waits = Waits::default();
        let _open = opened(&waits);
        let stranger = Token::new().unwrap().hash();
        assert_eq!(waits.offer(stranger, Ok(response("x"))), Offer::Unknown);
    }

    #[test]
    fn revoked_tokens_are_kept_up_to_the_bound_oldest_out_first() {
        let waits = Waits::default();
        let first = opened(&waits).0;
        waits.close(first);
        let mut last = first;
        for _ in 0..REVOKED_KEPT {
            last = opened(&waits).0;
            waits.close(last);
        }
        let table = waits.lock();
        assert_eq!(table.revoked.len(), REVOKED_KEPT);
        assert_eq!(table.order.len(), REVOKED_KEPT);
        drop(table);
        assert_eq!(waits.offer(first, Ok(response("x"))), Offer::Unknown);
        assert_eq!(waits.offer(last, Ok(response("x"))), Offer::Gone);
    }
}
