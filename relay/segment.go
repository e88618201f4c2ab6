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
	old  bool     // format 1, without marks: never appended to

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

// tmpSuffix names a segment being made: it gets its segment name only
// once its header is synced, so a crash never leaves a *.seg file without
// a whole header (Open removes a leftover *.seg.tmp).
const tmpSuffix = ".tmp"

// createSegment makes segment num durably: the file with its header,
// synced, under a temporary name, then renamed into place, and the
// directory synced.
func createSegment(dir string, num uint64, next Seq) (*segment, error) {
	path := filepath.Join(dir, segName(num))
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*segment, error) {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if _, err := f.Write(appendSegHeader(nil, segHeader{num: num, nextSeq: next})); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("segment %s exists already (%v)", path, err))
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{num: num, path: path, f: f, size: segHeaderSize}, nil
}

// removeLeftovers deletes the *.seg.tmp files a crash while making a
// segment can leave: nothing was ever written past their header.
func removeLeftovers(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), segSuffix+tmpSuffix) || !de.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, de.Name())
		if err := os.Remove(path); err != nil {
			return removed, err
		}
		removed = append(removed, path)
	}
	if len(removed) > 0 {
		return removed, syncDir(dir)
	}
	return nil, nil
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
		if r.kind == kindMark && r.at != sc.end {
			sc.bad = fmt.Errorf("a mark at byte %d says it is at byte %d", sc.end, r.at)
			return sc, nil
		}
		fn(r, sc.end, raw)
		sc.end += int64(len(raw))
	}
}

// markAfter looks for a valid mark anywhere in f after byte from, up to
// size: the bytes past damage are out of step with the records, so every
// offset is tried. It returns the first mark's offset, or -1.
func markAfter(f io.ReaderAt, from, size int64) (int64, error) {
	const chunk = 1 << 20
	buf := make([]byte, chunk+markSize)
	for base := from + 1; base+markSize <= size; base += chunk {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-base)], base)
		if err != nil && err != io.EOF {
			return -1, err
		}
		for i := 0; i+markSize <= n; i++ {
			if isMarkAt(buf[i:n], base+int64(i)) {
				return base + int64(i), nil
			}
		}
	}
	return -1, nil
}
