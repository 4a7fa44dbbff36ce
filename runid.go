package devhook

// ShortRunIDLen is the most characters ShortRunID returns.
const ShortRunIDLen = 12

// ShortRunID is a run id as devhook listen's terminal shows it: the whole
// id when it has at most 12 characters; for a UUID, 8 hex digits that
// differ from run to run (the first 8, or for the time-ordered versions 6
// and 7, whose first digits are the time and shared by runs started
// together, the last 8); else the first 12 characters. The same run always
// gets the same short id, so a command that takes a run id (scenario save
// --run, deliveries list --run-id) accepts it and finds the run it names.
func ShortRunID(id string) string {
	if len(id) <= ShortRunIDLen {
		return id
	}
	if isUUID(id) {
		if v := id[14]; v == '6' || v == '7' {
			return id[len(id)-8:]
		}
		return id[:8]
	}
	return id[:ShortRunIDLen]
}

// isUUID reports whether s is a UUID in its usual form,
// 8-4-4-4-12 hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
