package main

// splitJSON cuts data, a run of concatenated JSON objects, into the
// objects, as brpc's JsonLoader does: anything before an opening brace is
// skipped (whitespace, commas, the brackets of an array of objects), and
// an object ends at the brace that brings the depth back to 0. Braces
// inside strings do not count, and a string ends only at a quote that is
// not escaped (brpc's loader does not know escapes, so `"a\"}"` ends its
// object early there). The objects are subslices of data, not checked
// for validity: protojson reports what is wrong with each.
//
// tail is what follows the last complete object when that is an
// unterminated one (from its opening brace), nil otherwise.
func splitJSON(data []byte) (objects [][]byte, tail []byte) {
	depth := 0
	start := 0
	inString, escaped := false, false
	for i, c := range data {
		if depth == 0 {
			if c == '{' {
				depth, start = 1, i
			}
			continue
		}
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				objects = append(objects, data[start:i+1])
			}
		}
	}
	if depth > 0 {
		tail = data[start:]
	}
	return objects, tail
}
