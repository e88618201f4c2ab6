// Package ownerperm checks and sets the owner-only rule on the files and
// directories that hold busbar's secrets and sockets: the data directory,
// credentials and principals files, key files, the ports directory.
//
// On Unix the rule is the file mode: no permission bits for group or
// others (and, for a directory busbar shares with nobody, owned by the
// current user). Windows has no file modes that mean anything: who may
// open a file is its ACL. There the rule is that every ACL entry which
// allows access names the current user, the file's owner, SYSTEM or the
// Administrators group (the last two can take any file anyway, as root
// can on Unix), and a directory busbar creates gets exactly such an ACL,
// protected from its parent's and inherited by what is created inside it.
package ownerperm
