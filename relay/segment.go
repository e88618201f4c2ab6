package relay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// segment is one file of the log. The writer appends to the newest one
// (the active segment) and deletes the oldest once nothing in it is live.
type segment struct {
	num  uint64
	path string
	f    *os.File // set once; closed by Close or when the segment is deleted

	// Guarded by Store.mu (written by the writer and, for live counts,
	// by whoever kills an entry).
	size      int64 // bytes of whole, synced records (and the header)
	live      int   // live entries whose record is here
	liveBytes int64 // their record bytes
}

const segSuffix = ".seg"

func segName(num uint64) string { return fmt.Sprintf("%020d%s", num, segSuffix) }

// listSegments returns the segment numbers in dir, oldest first. Other
// files are ignored; a *.seg name that is not a number is an error.
func listSegments(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var nums []uint64
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), segSuffix)
		if !ok {
			continue
		}
		num, err := strconv.ParseUint(name, 10, 64)
		if err != nil || segName(num) != de.Name() || !de.Type().IsRegular() {
			return nil, &damagedError{file: filepath.Join(dir, de.Name()), err: errors.New("a *.seg file that is not a segment of this store")}
		}
		nums = append(nums, num)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	return nums, nil
}

// createSegment makes segment num durably: the file with its header,
// synced, and the directory entry, synced.
func createSegment(dir string, num uint64, next Seq) (*segment, error) {
	path := filepath.Join(dir, segName(num))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(appendSegHeader(nil, segHeader{num: num, nextSeq: next})); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{num: num, path: path, f: f, size: segHeaderSize}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// scanned is what scanning a segment found.
type scanned struct {
	header segHeader
	end    int64 // the offset after the last whole, valid record
	bad    error // why the bytes at end are not a record (nil: the file ends there)
}

// scanSegment reads a segment's header and records, calling fn for each
// valid record with its offset, and stops at the first thing that is not
// one. The error is for a read that failed; what the bytes are is in
// scanned.
func scanSegment(f io.ReaderAt, fn func(r record, off int64, raw []byte)) (scanned, error) {
	var sc scanned
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 256<<10)
	hdr := make([]byte, segHeaderSize)
	if n, err := io.ReadFull(br, hdr); err != nil {
		if err != io.EOF && err != io.ErrUnexpectedEOF {
			return sc, err
		}
		sc.bad = fmt.Errorf("segment header of %d bytes, short of %d", n, segHeaderSize)
		return sc, nil
	}
	h, err := decodeSegHeader(hdr)
	if err != nil {
		sc.bad = err
		return sc, nil
	}
	sc.header, sc.end = h, segHeaderSize
	var buf []byte
	for {
		r, raw, err := readRecord(br, buf)
		buf = raw
		switch {
		case err == io.EOF:
			return sc, nil
		case errors.As(err, new(*readError)):
			return sc, err // not the bytes' fault
		case err != nil:
			sc.bad = err
			return sc, nil
		}
		fn(r, sc.end, raw)
		sc.end += int64(len(raw))
	}
}
