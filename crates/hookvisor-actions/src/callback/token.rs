//! Callback tokens (rule 3): 32 bytes of the OS CSPRNG spelled base64url, and the SHA-256 that
//! is all the listener keeps of them.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The random bytes of a token.
const TOKEN_BYTES: usize = 32;

/// The length of a token's text: 32 bytes in base64url without padding.
pub(super) const TOKEN_LEN: usize = 43;

/// A fresh token. Only [`Token::text`] goes into the URL; only [`Token::hash`] is kept.
pub(super) struct Token(String);

impl Token {
    /// 32 bytes from the OS random source (`getrandom`), never a userspace generator.
    pub(super) fn new() -> Result<Token, getrandom::Error> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes)?;
        Ok(Token(URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The base64url text that goes into `${callback_url}`.
    pub(super) fn text(&self) -> &str {
        &self.0
    }

    /// The hash a request's token is looked up by.
    pub(super) fn hash(&self) -> TokenHash {
        TokenHash::of(&self.0)
    }
}

/// The SHA-256 of a token's text: what the table keys on, so the secret is never held, and a
/// lookup's timing says nothing about how much of a guess was right.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of the token text a request carries.
    pub(super) fn of(text: &str) -> TokenHash {
        TokenHash(Sha256::digest(text.as_bytes()).into())
    }
}

/// Shows the first 4 bytes of the hash: enough to follow one wait through the logs, useless to
/// answer it.
impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..4] {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Whether `text` can be a token at all: the base64url alphabet and the right length. Anything
/// else is 404 without a lookup.
pub(super) fn well_formed(text: &str) -> bool {
    text.len() == TOKEN_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_43_base64url_characters_and_differ() {
        let a = Token::new().unwrap();
        let b = Token::new().unwrap();
        assert!(well_formed(a.text()), "{}", a.text());
        assert_ne!(a.text(), b.text());
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash(), TokenHash::of(a.text()));
        // 32 bytes come back out of the text.
        assert_eq!(URL_SAFE_NO_PAD.decode(a.text()).unwrap().len(), TOKEN_BYTES);
    }

    #[test]
    fn well_formed_takes_only_the_alphabet_and_length() {
        let good = "A".repeat(TOKEN_LEN);
        assert!(well_formed(&good));
        for bad in [
            String::new(),
            "A".repeat(TOKEN_LEN - 1),
            "A".repeat(TOKEN_LEN + 1),
            format!("{}=", "A".repeat(TOKEN_LEN - 1)),
            format!("{}/", "A".repeat(TOKEN_LEN - 1)),
            format!("{}%", "A".repeat(TOKEN_LEN - 1)),
            format!("{}é", "A".repeat(TOKEN_LEN - 2)),
        ] {
            assert!(!well_formed(&bad), "{bad:?}");
        }
    }

    #[test]
    fn the_debug_form_of_a_hash_is_short_and_is_not_the_token() {
        let token = Token::new().unwrap();
        let shown = format!("{:?}", token.hash());
        assert_eq!(shown.len(), 8);
        assert!(!token.text().contains(&shown));
    }
}
