//! A pod's `metadata.uid`, kept small: the API server's UUIDs as their 16 bytes.

/// A pod's `metadata.uid`: the API server's UUIDs kept as their 16 bytes, anything else (a
/// test's, another server's) as it was written.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl Uid {
    /// `text` as a UUID when it is one in the canonical lowercase form (so that it reads back
    /// exactly as written), else as written.
    pub fn parse(text: &str) -> Self {
        match uuid_bytes(text) {
            Some(bytes) => Uid::Uuid(bytes),
            None => Uid::Other(text.into()),
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Uid::Other(text) if text.is_empty())
    }
}

/// The 16 bytes of a UUID in the canonical lowercase hyphenated form; `None` for any other text.
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    const HYPHENS: [usize; 4] = [8, 13, 18, 23];
    let text = text.as_bytes();
    if text.len() != 36 || HYPHENS.iter().any(|&i| text[i] != b'-') {
        return None;
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut digits = text
        .iter()
        .enumerate()
        .filter(|(i, _)| !HYPHENS.contains(i))
        .map(|(_, &b)| nibble(b));
    let mut bytes = [0; 16];
    for byte in &mut bytes {
        *byte = digits.next()?? << 4 | digits.next()??;
    }
    Some(bytes)
}

impl Default for Uid {
    fn default() -> Self {
        Uid::Other(Box::default())
    }
}

impl std::fmt::Display for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Uid::Other(text) => f.write_str(text),
            Uid::Uuid(bytes) => {
                for (i, b) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::fmt::Debug for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_server_uids_are_kept_as_bytes_and_read_back_as_written() {
        for text in [
            "6f1c2a3b-4d5e-4f60-8a7b-00000000002a",
            "u",
            "",
            "6F1C2A3B-4D5E-4F60-8A7B-00000000002A",
        ] {
            assert_eq!(Uid::parse(text).to_string(), text);
        }
        assert!(matches!(
            Uid::parse("6f1c2a3b-4d5e-4f60-8a7b-00000000002a"),
            Uid::Uuid(_)
        ));
        assert!(matches!(
            Uid::parse("6F1C2A3B-4D5E-4F60-8A7B-00000000002A"),
            Uid::Other(_)
        ));
        for not_canonical in [
            "6f1c2a3b-4d5e-4f60-8a7b-00000000002",
            "6f1c2a3b4-d5e-4f60-8a7b-00000000002a",
            "6f1c2a3b-4d5e-4f60-8a7b-00000000002g",
            "6f1c2a3b-4d5e-4f60-8a7b-0000000000é",
        ] {
            assert!(matches!(Uid::parse(not_canonical), Uid::Other(_)));
            assert_eq!(Uid::parse(not_canonical).to_string(), not_canonical);
        }
        assert!(Uid::parse("").is_empty() && !Uid::parse("u").is_empty());
    }
}
