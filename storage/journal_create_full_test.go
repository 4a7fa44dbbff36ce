package storage

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A journal file created on a full disk (a real tmpfs, filled) whose
// header the disk refuses is not created: the create fails and leaves no
// file. Before, the header's error was lost to a variable scoped to an
// if: the file was used without its magic, the records written to it
// once there was room again were acknowledged, and the next Open set the
// file aside as not a journal, nothing read from it (found from outside:
// listen stopped while deliveries were held on a full tmpfs, then started
// with room, said deliveries.db.journal1 was not a devhook journal).
func TestCreateJournalFile_FullDiskRefusesTheHeader(t *testing.T) {
	dir, _ := fullTmpfs(t)
	for _, noMap := range []bool{false, true} {
		path := filepath.Join(dir, "deliveries.db.journal1")
		jf, err := createJournalFile(path, 5, noMap)
		if err == nil {
			jf.close()
			t.Errorf("noMap %v: a journal file created on a full disk, its header refused: want an error", noMap)
		} else if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("noMap %v: %v, want ENOSPC", noMap, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("noMap %v: the journal file is left on the disk (%v), without its header", noMap, err)
		}
	}
}
