package framing

import "errors"

// ErrCOBS reports a malformed COBS encoding: a 0x00 inside the encoded bytes,
// or a code byte that points past the end of the input.
var ErrCOBS = errors.New("framing: malformed cobs encoding")

// MaxEncodedLen returns the largest COBS encoding of n bytes: one code byte
// per started run of 254 bytes, plus one. The encoding never contains 0x00;
// the frame delimiter is not included.
func MaxEncodedLen(n int) int {
	return n + n/254 + 1
}

// AppendEncode appends the COBS encoding of src to dst and returns the
// extended slice. It allocates only if dst lacks capacity (see MaxEncodedLen).
func AppendEncode(dst, src []byte) []byte {
	// codeAt indexes the code byte of the current block, filled in when the
	// block ends (at a zero in src, after 254 non-zero bytes, or at the end).
	codeAt := len(dst)
	dst = append(dst, 0)
	code := byte(1)
	for i, b := range src {
		if b == 0 {
			dst[codeAt] = code
			codeAt = len(dst)
			dst = append(dst, 0)
			code = 1
			continue
		}
		dst = append(dst, b)
		code++
		if code == 0xFF {
			dst[codeAt] = code
			code = 1
			// A full block that ends exactly at the end of src needs no
			// further code byte: the decoder drops a trailing implied zero.
			if i == len(src)-1 {
				return dst
			}
			codeAt = len(dst)
			dst = append(dst, 0)
		}
	}
	dst[codeAt] = code
	return dst
}

// AppendDecode appends the COBS decoding of src (without the 0x00
// delimiter) to dst and returns the extended slice. It returns ErrCOBS if src
// contains a 0x00 or a code byte runs past the end of src, or is empty.
//
// Decoding in place is allowed: AppendDecode(src[:0], src) is safe, because
// the output never runs ahead of the input.
func AppendDecode(dst, src []byte) ([]byte, error) {
	if len(src) == 0 {
		return dst, ErrCOBS
	}
	for i := 0; i < len(src); {
		code := src[i]
		if code == 0 {
			return dst, ErrCOBS
		}
		i++
		end := i + int(code) - 1
		if end > len(src) {
			return dst, ErrCOBS
		}
		for _, b := range src[i:end] {
			if b == 0 {
				return dst, ErrCOBS
			}
			dst = append(dst, b)
		}
		i = end
		// A block shorter than 254 bytes implies a zero after it, except
		// at the very end of the input.
		if code != 0xFF && i < len(src) {
			dst = append(dst, 0)
		}
	}
	return dst, nil
}
