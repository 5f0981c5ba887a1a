//! The change journal: what a scan leaves for the next. The rules cited here, "module rule 6"
//! included, are those of the `changes` module docs (5 and 6).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ChangesError, Timestamp};
use crate::state::{Durability, parent_dir, write_atomic};

pub(super) const JOURNAL_VERSION: u32 = 1;

/// What a scan leaves for the next: deletions with the time they were noticed, and outside git
/// the files the walk found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "JournalFile", try_from = "JournalFile")]
pub(super) struct Journal {
    pub(super) version: u32,
    /// Lossy when not UTF-8: it only tells whose journal this is.
    pub(super) workspace: String,
    pub(super) deleted: BTreeMap<OsString, Timestamp>,
    pub(super) walk: Option<Vec<OsString>>,
}

/// The journal as written: names in the spelling of module rule 6.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalFile {
    version: u32,
    workspace: String,
    deleted: BTreeMap<String, Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    walk: Option<Vec<String>>,
}

impl From<Journal> for JournalFile {
    fn from(j: Journal) -> JournalFile {
        let encode = |n: &OsString| name::encode(n).into_owned();
        JournalFile {
            version: j.version,
            workspace: j.workspace,
            deleted: j.deleted.iter().map(|(n, t)| (encode(n), *t)).collect(),
            walk: j.walk.as_ref().map(|w| w.iter().map(encode).collect()),
        }
    }
}

impl TryFrom<JournalFile> for Journal {
    type Error = String;

    fn try_from(j: JournalFile) -> Result<Journal, String> {
        Ok(Journal {
            version: j.version,
            workspace: j.workspace,
            deleted: j
                .deleted
                .iter()
                .map(|(n, t)| Ok((name::decode(n)?, *t)))
                .collect::<Result<_, String>>()?,
            walk: j
                .walk
                .map(|w| w.iter().map(|n| name::decode(n)).collect())
                .transpose()?,
        })
    }
}

/// The serialised spelling of a relative path (module rule 6): itself when it is UTF-8, else a
/// NUL followed by the hex of its bytes.
pub(super) mod name {
    use super::*;

    pub(super) fn encode(name: &OsStr) -> Cow<'_, str> {
        match name.to_str() {
            Some(text) => Cow::Borrowed(text),
            None => {
                let mut text = String::from("\0");
                for byte in name.as_bytes() {
                    text.push_str(&format!("{byte:02x}"));
                }
                Cow::Owned(text)
            }
        }
    }

    pub(super) fn decode(text: &str) -> Result<OsString, String> {
        let Some(hex) = text.strip_prefix('\0') else {
            return Ok(OsString::from(text));
        };
        let bad = || format!("{text:?} is not a NUL and hex digits");
        if hex.len() % 2 != 0 {
            return Err(bad());
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .map(OsString::from_vec)
            .ok_or_else(bad)
    }

    pub(crate) fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&encode(path.as_os_str()))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<PathBuf, D::Error> {
        let text = String::deserialize(deserializer)?;
        decode(&text)
            .map(PathBuf::from)
            .map_err(serde::de::Error::custom)
    }
}

impl Journal {
    fn empty(workspace: &Path) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            workspace: workspace.to_string_lossy().into_owned(),
            deleted: BTreeMap::new(),
            walk: None,
        }
    }

    /// The journal at `path`; an empty one when there is none, it is unreadable, or it belongs
    /// to another workspace. `true` when a bad file should be replaced even if nothing changed.
    pub(super) fn load(path: &Path, workspace: &Path) -> (Journal, bool) {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return (Journal::empty(workspace), false);
            }
            Err(e) => {
                tracing::warn!(
                    "change journal {}: {e}; starting a new one (deletions noticed before may be \
                     reported again); make it readable to keep them",
                    path.display()
                );
                return (Journal::empty(workspace), true);
            }
        };
        let fresh = Journal::empty(workspace);
        match serde_json::from_slice::<Journal>(&bytes) {
            Ok(j) if j.version == fresh.version && j.workspace == fresh.workspace => (j, false),
            Ok(_) => (fresh, true),
            Err(e) => {
                tracing::warn!(
                    "change journal {}: corrupt ({e}); starting a new one (deletions noticed \
                     before may be reported again)",
                    path.display()
                );
                (fresh, true)
            }
        }
    }

    /// Writes the journal atomically and durably: a deletion it forgets is reported again.
    pub(super) fn save(&self, path: &Path) -> Result<(), ChangesError> {
        let error = |source| ChangesError::Journal {
            path: path.to_path_buf(),
            source,
        };
        fs::create_dir_all(parent_dir(path)).map_err(error)?;
        let bytes = serde_json::to_vec(self).expect("a journal always serialises");
        write_atomic(path, &bytes, Durability::Durable).map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::changes::tests::{Fixture, expect, journal_in, non_utf8_name, summary, write};
    use crate::changes::{ChangesError, DirtyFile, FileState, ScanOptions, scan_with};

    /// Rule 6: a name that is not UTF-8 goes through the journal byte for byte: outside git
    /// its deletion is noticed and keeps its date, as any other's.
    #[test]
    fn a_deleted_name_that_is_not_utf8_keeps_its_date_through_the_journal() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        fs::write(root.join(non_utf8_name()), "x").unwrap();
        let journal = journal_in(&tmp);
        let options = ScanOptions::new().use_git(false);
        let first = scan_with(&root, &journal, &options).unwrap();
        assert_eq!(summary(&first), expect(&[("caf\\xe9.txt", "present")]));
        fs::remove_file(root.join(non_utf8_name())).unwrap();
        let second = scan_with(&root, &journal, &options).unwrap();
        let third = scan_with(&root, &journal, &options).unwrap();
        for scan in [&second, &third] {
            assert_eq!(
                scan.files,
                [DirtyFile {
                    path: PathBuf::from(non_utf8_name()),
                    state: FileState::Deleted {
                        noticed_at: second.cutoff
                    },
                }]
            );
        }
    }

    #[test]
    fn serialised_names_table() {
        let table: &[(&[u8], &str)] = &[
            (b"a.txt", "a.txt"),
            (b"dir/\xc3\xbc.txt", "dir/\u{fc}.txt"),
            (b"caf\xe9.txt", "\x00636166e92e747874"),
            (b"\xff", "\0ff"),
        ];
        for &(bytes, text) in table {
            let path = PathBuf::from(OsStr::from_bytes(bytes));
            assert_eq!(name::encode(path.as_os_str()), text);
            assert_eq!(name::decode(text).unwrap(), path.as_os_str());
            let file = DirtyFile {
                path: path.clone(),
                state: FileState::Present {
                    changed_at: Timestamp::from_nanos(1),
                },
            };
            let json = serde_json::to_string(&file).unwrap();
            assert_eq!(serde_json::from_str::<DirtyFile>(&json).unwrap(), file);
        }
        for bad in ["\0abc", "\0zz", "\0é"] {
            assert!(name::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn corrupt_journal_is_reset_with_a_warning() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        write(&root, "a.txt", "a");
        let journal = journal_in(&tmp);
        write(&tmp.state(), "changes.journal", "{ not json");
        let options = ScanOptions::new().use_git(false);
        let scan = scan_with(&root, &journal, &options).unwrap();
        assert_eq!(summary(&scan), expect(&[("a.txt", "present")]));
        let text = fs::read_to_string(&journal).unwrap();
        let parsed: Journal = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed.walk, Some(vec![OsString::from("a.txt")]));
    }

    #[test]
    fn journal_of_another_workspace_is_not_used() {
        let tmp = Fixture::plain();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        write(&one, "only-in-one.txt", "x");
        write(&two, "b.txt", "x");
        let journal = journal_in(&tmp);
        let options = ScanOptions::new().use_git(false);
        scan_with(&one, &journal, &options).unwrap();
        let scan = scan_with(&two, &journal, &options).unwrap();
        assert_eq!(summary(&scan), expect(&[("b.txt", "present")]));
    }

    #[test]
    fn unwritable_journal_is_an_error_naming_it() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        write(&root, "a.txt", "a");
        // A parent that is a file cannot become a directory, even for root.
        write(&tmp.state(), "blocker", "x");
        let journal = tmp.state().join("blocker/changes.journal");
        let err = scan_with(&root, &journal, &ScanOptions::new().use_git(false)).unwrap_err();
        assert!(matches!(err, ChangesError::Journal { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("blocker/changes.journal"), "{text}");
        assert!(text.contains("--state-dir"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
