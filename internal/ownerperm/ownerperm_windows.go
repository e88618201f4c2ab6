package ownerperm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// MkdirAll creates dir and any missing parents, as os.MkdirAll does, and
// gives dir, when it creates it, an ACL that lets only the current user,
// SYSTEM and the Administrators group in, inherited by the files and
// directories created inside it and not by its parent's. An existing dir
// is left as it is, for Exposed to judge.
func MkdirAll(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	me, err := currentUser()
	if err != nil {
		return err
	}
	// D:P: a protected DACL (nothing inherited from the parent); each
	// entry full access (FA), inherited by objects and containers
	// (OICI), for the user, SYSTEM (SY) and Administrators (BA).
	sd, err := windows.SecurityDescriptorFromString("D:P(A;OICI;FA;;;" + me.String() + ")(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)")
	if err != nil {
		return fmt.Errorf("ownerperm: %s: %w", dir, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return fmt.Errorf("ownerperm: %s: %w", dir, err)
	}
	err = windows.SetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
	if err != nil {
		return fmt.Errorf("ownerperm: setting the ACL of %s: %w", dir, err)
	}
	return nil
}

// Exposed returns "" when no other user may reach the file or directory
// at path; else what exposes it, for an error message: the first ACL
// entry that allows anyone but the current user, the file's owner,
// SYSTEM or Administrators in. mask is the Unix rule's, unused here:
// any access by others counts. ownedByMe also asks that the current user
// own it (or Administrators, which own what an elevated user creates).
func Exposed(path string, _ fs.FileInfo, _ fs.FileMode, ownedByMe bool) string {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Sprintf("an ACL that cannot be read (%v)", err)
	}
	me, err := currentUser()
	if err != nil {
		return fmt.Sprintf("an ACL that cannot be judged (%v)", err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return "no owner"
	}
	trusted := func(sid *windows.SID) bool {
		return sid.Equals(me) || sid.Equals(owner) ||
			sid.IsWellKnown(windows.WinLocalSystemSid) || sid.IsWellKnown(windows.WinBuiltinAdministratorsSid)
	}
	if ownedByMe && !owner.Equals(me) && !owner.IsWellKnown(windows.WinBuiltinAdministratorsSid) {
		return "owner " + account(owner)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return fmt.Sprintf("an ACL that cannot be read (%v)", err)
	}
	if dacl == nil {
		return "no ACL (everyone may open it)"
	}
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return fmt.Sprintf("an ACL that cannot be read (%v)", err)
		}
		if ace.Header.AceType != windows.ACCESS_ALLOWED_ACE_TYPE || ace.Header.AceFlags&windows.INHERIT_ONLY_ACE != 0 {
			continue // denies, audits, and entries only for what is created inside
		}
		if sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart)); !trusted(sid) {
			return "an ACL entry allowing " + account(sid)
		}
	}
	return ""
}

// Fix is the command that makes path private to its owner: replace the
// inherited entries with one for the current user.
func Fix(path string, _ bool) string {
	return `icacls "` + path + `" /inheritance:r /grant:r "%USERNAME%":F`
}

// currentUser is the SID of the user the process runs as.
func currentUser() (*windows.SID, error) {
	tu, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, fmt.Errorf("ownerperm: the current user: %w", err)
	}
	return tu.User.Sid, nil
}

// account names sid for a message: DOMAIN\name, or the SID string.
func account(sid *windows.SID) string {
	name, domain, _, err := sid.LookupAccount("")
	if err != nil {
		return sid.String()
	}
	return domain + `\` + name
}
