//! Bytes read in chunks (an exec's output, a file followed as it grows) decoded as UTF-8
//! without breaking a character that a chunk boundary splits.

/// Decodes a stream of bytes as UTF-8 across chunk boundaries: an incomplete character at the
/// end of a chunk waits in `carry` for the next; invalid bytes become U+FFFD.
pub fn decode_utf8(carry: &mut Vec<u8>, chunk: &[u8]) -> String {
    carry.extend_from_slice(chunk);
    let mut out = String::new();
    let mut rest: &[u8] = carry;
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                rest = &[];
                break;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).expect("checked valid"));
                match e.error_len() {
                    Some(n) => {
                        out.push('\u{fffd}');
                        rest = &after[n..];
                    }
                    None => {
                        rest = after;
                        break;
                    }
                }
            }
        }
    }
    let keep = rest.to_vec();
    *carry = keep;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_split_across_chunks_are_joined() {
        let text = "é→✓ ok";
        let bytes = text.as_bytes();
        let mut carry = Vec::new();
        let mut out = String::new();
        for chunk in bytes.chunks(1) {
            out.push_str(&decode_utf8(&mut carry, chunk));
        }
        assert_eq!(out, text);
        assert!(carry.is_empty());
        let mut carry = Vec::new();
        assert_eq!(decode_utf8(&mut carry, b"a\xffb"), "a\u{fffd}b");
        assert_eq!(decode_utf8(&mut carry, b"x\xe2\x86"), "x");
        assert_eq!(carry, b"\xe2\x86");
        assert_eq!(decode_utf8(&mut carry, b"\x92"), "→");
    }
}
