package statestore

// The state store's file as bytes, checked before bbolt opens it.
//
// bbolt trusts its file: it initialises an empty one without a word,
// follows page ids into its memory map without bounds, sizes allocations
// by counts read from it, and runs Tx.Check in a goroutine of its own,
// where neither a recover nor SetPanicOnFault of ours reaches. So
// inspectFile reads the file with ordinary bounds-checked reads first and
// refuses it unless every page bbolt will touch lies in the file and every
// count, offset and length on those pages stays inside its page: what
// bbolt then reads is memory it mapped, and what is wrong with it is left
// to Tx.Check and to load, as errors.
//
// The layout is bbolt v1.5.0's (go.etcd.io/bbolt/internal/common), in the
// machine's byte order:
//
//	page header  id u64 | flags u16 | count u16 | overflow u32          (16 bytes)
//	meta         magic u32 | version u32 | pageSize u32 | flags u32 |
//	             root {pgid u64, sequence u64} | freelist u64 | pgid u64 |
//	             txid u64 | checksum u64 (FNV-64a of the fields before it)
//	branch elem  pos u32 | ksize u32 | pgid u64 (key at elem+pos)
//	leaf elem    flags u32 | pos u32 | ksize u32 | vsize u32 (key at elem+pos, value after it)
//	bucket value root pgid u64 | sequence u64 [| inline leaf page when root is 0]
//	freelist     count ids u64 (count 0xFFFF: the real count is the first u64)
//
// Pages 0 and 1 are the meta pages; a commit writes the other one, with
// the next txid. bbolt opens at the valid one with the higher txid, so a
// damaged newest meta page silently takes it back one transaction: that
// is reported (fileInfo.damagedMeta), and Open logs it.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

const (
	pageHeaderSize = 16
	elemSize       = 16 // branch and leaf elements alike
	metaEnd        = pageHeaderSize + 64
	bucketHeader   = 16

	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	noFreelist     = ^uint64(0)
	flagBranch     = 0x01
	flagLeaf       = 0x02
	flagFreelist   = 0x10
	flagBucketLeaf = 0x01 // a leaf element that is a nested bucket

	minPageSize = 1024    // bbolt looks for the second meta page from 1 KiB …
	maxPageSize = 1 << 24 // … to 16 MiB
	maxDepth    = 64      // far deeper than any tree bbolt builds
)

var ne = binary.NativeEndian

// fileInfo is what inspectFile found.
type fileInfo struct {
	exists      bool
	txid        uint64 // of the meta page bbolt will open at
	damagedMeta int    // 0 or 1: that meta page is damaged (bbolt opens at the other); -1: neither
}

type meta struct {
	pageSize                uint32
	root, freelist, hwm, tx uint64
}

// readMeta decodes the meta page at the start of p and validates it as
// bbolt does: magic, version and checksum.
func readMeta(p []byte) (meta, error) {
	if len(p) < metaEnd {
		return meta{}, errors.New("shorter than a meta page")
	}
	m := p[pageHeaderSize:metaEnd]
	h := fnv.New64a()
	_, _ = h.Write(m[:56])
	switch {
	case ne.Uint32(m[0:]) != boltMagic:
		return meta{}, errors.New("not a bbolt meta page (magic)")
	case ne.Uint32(m[4:]) != boltVersion:
		return meta{}, fmt.Errorf("bbolt format version %d, not %d", ne.Uint32(m[4:]), boltVersion)
	case ne.Uint64(m[56:]) != h.Sum64():
		return meta{}, errors.New("checksum mismatch")
	}
	return meta{pageSize: ne.Uint32(m[8:]), root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]), hwm: ne.Uint64(m[40:]), tx: ne.Uint64(m[48:])}, nil
}

// txidOf is a meta page's txid field as bbolt compares it, valid or not.
func txidOf(p []byte) uint64 {
	if len(p) < metaEnd {
		return 0
	}
	return ne.Uint64(p[pageHeaderSize+48:])
}

// inspectFile checks the file at path before bbolt opens it. A missing file
// is fine (a new store); an empty or truncated one, or one whose pages
// bbolt would read out of bounds, is an error.
func inspectFile(path string) (fileInfo, error) {
	info := fileInfo{damagedMeta: -1}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return info, nil
	}
	if err != nil {
		return info, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return info, err
	}
	info.exists = true
	size := st.Size()
	if size == 0 {
		return info, errors.New("the file is empty (0 bytes); bbolt would start a new, empty store over it and every namespace would be lost")
	}
	pageSize, err := findPageSize(f, size)
	if err != nil {
		return info, err
	}
	if size < 2*pageSize {
		return info, fmt.Errorf("the file is %s, shorter than bbolt's two meta pages (2 × %d): it is truncated", byteCount(size), pageSize)
	}
	p0, p1 := make([]byte, metaEnd), make([]byte, metaEnd)
	if _, err := f.ReadAt(p0, 0); err != nil {
		return info, err
	}
	if _, err := f.ReadAt(p1, pageSize); err != nil {
		return info, err
	}
	m0, err0 := readMeta(p0)
	m1, err1 := readMeta(p1)
	// bbolt's rule (DB.meta): the valid one of the two with the higher txid.
	m, damaged := m0, -1
	switch {
	case err0 != nil && err1 != nil:
		return info, fmt.Errorf("both meta pages are damaged (%v; %v)", err0, err1)
	case err1 != nil:
		damaged = 1
	case err0 != nil:
		m, damaged = m1, 0
	case txidOf(p1) > txidOf(p0):
		m = m1
	}
	info.txid, info.damagedMeta = m.tx, damaged
	if int64(m.pageSize) != pageSize {
		return info, fmt.Errorf("its meta page says pages of %d bytes, its layout %d", m.pageSize, pageSize)
	}
	if m.hwm < 2 || m.hwm > uint64(size/pageSize) {
		return info, fmt.Errorf("the store has %d pages of %d bytes but the file only %s: it is truncated", m.hwm, pageSize, byteCount(size))
	}
	fc := &fileCheck{f: f, pageSize: uint64(pageSize), hwm: m.hwm, seen: map[uint64]bool{}}
	if m.freelist != noFreelist {
		if err := fc.freelist(m.freelist); err != nil {
			return info, err
		}
	}
	if err := fc.tree(m.root, 0); err != nil {
		return info, err
	}
	return info, nil
}

// findPageSize reads it from the first meta page or, when that one is
// damaged, finds the second one where bbolt looks for it.
func findPageSize(f *os.File, size int64) (int64, error) {
	p := make([]byte, metaEnd)
	n, err := f.ReadAt(p, 0)
	if n < metaEnd {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("the file is %s, shorter than one bbolt meta page: it is truncated", byteCount(size))
		}
		return 0, err
	}
	if m, err := readMeta(p); err == nil {
		if m.pageSize < minPageSize || m.pageSize > maxPageSize {
			return 0, fmt.Errorf("its meta page says pages of %d bytes", m.pageSize)
		}
		return int64(m.pageSize), nil
	}
	for pos := int64(minPageSize); pos <= maxPageSize && pos < size-minPageSize; pos *= 2 {
		if n, _ := f.ReadAt(p, pos); n < metaEnd {
			break
		}
		if m, err := readMeta(p); err == nil && int64(m.pageSize) == pos {
			return pos, nil
		}
	}
	return 0, errors.New("no valid bbolt meta page: it is not a bbolt file, or both meta pages are damaged")
}

// fileCheck walks the pages bbolt will read.
type fileCheck struct {
	f        *os.File
	pageSize uint64
	hwm      uint64
	seen     map[uint64]bool // page ids taken, overflow included
}

// page reads page id with its overflow pages, which must lie below the
// high-water mark, be referenced once, and say they are page id.
func (fc *fileCheck) page(id uint64) ([]byte, error) {
	if id < 2 || id >= fc.hwm {
		return nil, fmt.Errorf("page id %d is outside the store's pages 2..%d", id, fc.hwm-1)
	}
	head := make([]byte, pageHeaderSize)
	if _, err := fc.f.ReadAt(head, int64(id*fc.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := ne.Uint64(head); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	span := uint64(ne.Uint32(head[12:])) + 1
	if span > fc.hwm-id {
		return nil, fmt.Errorf("page %d runs %d pages, past the store's %d", id, span, fc.hwm)
	}
	for i := id; i < id+span; i++ {
		if fc.seen[i] {
			return nil, fmt.Errorf("page %d is referenced twice", i)
		}
		fc.seen[i] = true
	}
	p := make([]byte, span*fc.pageSize)
	if _, err := fc.f.ReadAt(p, int64(id*fc.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return p, nil
}

func (fc *fileCheck) freelist(id uint64) error {
	p, err := fc.page(id)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if flags := ne.Uint16(p[8:]); flags != flagFreelist {
		return fmt.Errorf("freelist page %d has flags %#x", id, flags)
	}
	start, count := uint64(pageHeaderSize), uint64(ne.Uint16(p[10:]))
	if count == 0xFFFF {
		count, start = ne.Uint64(p[pageHeaderSize:]), pageHeaderSize+8
	}
	if count > (uint64(len(p))-start)/8 {
		return fmt.Errorf("freelist page %d lists %d pages, more than it holds", id, count)
	}
	for i := range count {
		if free := ne.Uint64(p[start+8*i:]); free < 2 || free >= fc.hwm {
			return fmt.Errorf("freelist page %d lists page %d, outside the store's pages", id, free)
		}
	}
	return nil
}

// tree checks the b+tree rooted at page id: branch elements and leaf
// elements inside their page, nested buckets, children recursively.
func (fc *fileCheck) tree(id uint64, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("page %d: the tree is deeper than %d levels", id, maxDepth)
	}
	p, err := fc.page(id)
	if err != nil {
		return err
	}
	switch flags := ne.Uint16(p[8:]); flags {
	case flagBranch:
		children, err := branch(p)
		if err != nil {
			return fmt.Errorf("branch page %d: %w", id, err)
		}
		for _, c := range children {
			if err := fc.tree(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	case flagLeaf:
		return fc.leaf(p, id, depth)
	default:
		return fmt.Errorf("page %d has flags %#x where a branch or leaf page belongs", id, flags)
	}
}

// branch returns a branch page's children, after checking its elements.
func branch(p []byte) ([]uint64, error) {
	count := uint64(ne.Uint16(p[10:]))
	if count == 0 {
		return nil, errors.New("no elements")
	}
	if pageHeaderSize+count*elemSize > uint64(len(p)) {
		return nil, fmt.Errorf("%d elements do not fit", count)
	}
	children := make([]uint64, count)
	for i := range count {
		at := pageHeaderSize + i*elemSize
		e := p[at:]
		if err := inside(p, at, ne.Uint32(e), ne.Uint32(e[4:]), 0); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		children[i] = ne.Uint64(e[8:])
	}
	return children, nil
}

// leaf checks a leaf page's elements (p is the page, or an inline
// bucket's page when id is 0) and walks its nested buckets.
func (fc *fileCheck) leaf(p []byte, id uint64, depth int) error {
	name := fmt.Sprintf("leaf page %d", id)
	if id == 0 {
		name = "its inline page"
	}
	count := uint64(ne.Uint16(p[10:]))
	if pageHeaderSize+count*elemSize > uint64(len(p)) {
		return fmt.Errorf("%s: %d elements do not fit", name, count)
	}
	for i := range count {
		at := pageHeaderSize + i*elemSize
		e := p[at:]
		flags, pos, ksize, vsize := ne.Uint32(e), ne.Uint32(e[4:]), ne.Uint32(e[8:]), ne.Uint32(e[12:])
		if err := inside(p, at, pos, ksize, vsize); err != nil {
			return fmt.Errorf("%s, element %d: %w", name, i, err)
		}
		if flags&flagBucketLeaf == 0 {
			continue
		}
		v := p[at+uint64(pos)+uint64(ksize):][:vsize]
		if err := fc.bucket(v, depth); err != nil {
			return fmt.Errorf("%s, element %d (a bucket): %w", name, i, err)
		}
	}
	return nil
}

// bucket checks a nested bucket's value: its root page, or its inline page.
func (fc *fileCheck) bucket(v []byte, depth int) error {
	if len(v) < bucketHeader {
		return errors.New("a bucket value shorter than its header")
	}
	if root := ne.Uint64(v); root != 0 {
		return fc.tree(root, depth+1)
	}
	inline := v[bucketHeader:]
	if len(inline) < pageHeaderSize {
		return errors.New("its inline page is shorter than a page header")
	}
	if flags := ne.Uint16(inline[8:]); flags != flagLeaf {
		return fmt.Errorf("its inline page has flags %#x", flags)
	}
	count := uint64(ne.Uint16(inline[10:]))
	if pageHeaderSize+count*elemSize > uint64(len(inline)) {
		return fmt.Errorf("its inline page: %d elements do not fit", count)
	}
	for i := range count {
		if ne.Uint32(inline[pageHeaderSize+i*elemSize:])&flagBucketLeaf != 0 {
			return errors.New("its inline page holds a bucket") // bbolt never inlines those
		}
	}
	return fc.leaf(inline, 0, depth+1)
}

// inside checks that the key (and value) of the element at offset at, pos
// bytes past it, lie within p; a key is never empty.
func inside(p []byte, at uint64, pos, ksize, vsize uint32) error {
	if ksize == 0 {
		return errors.New("an empty key")
	}
	if end := at + uint64(pos) + uint64(ksize) + uint64(vsize); end > uint64(len(p)) {
		return fmt.Errorf("its key and value end at byte %d of a %d-byte page", end, len(p))
	}
	return nil
}

func byteCount(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}
