/* leftover.h -- what a purlin run may leave behind: files in /dev/shm, /tmp, $TMPDIR and
 * $XDG_RUNTIME_DIR whose name contains "purlin", files inside directories so named (the
 * rendezvous' secret id files), Unix sockets (abstract or path) whose name contains "purlin", and
 * processes.
 * Used by fault_test (after each crash scenario) and by leftover_check (around the whole suite). */
#ifndef PURLIN_TEST_LEFTOVER_H
#define PURLIN_TEST_LEFTOVER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  char **name; /* "file:/dev/shm/x", "sock:@name" or "sock:/path" */
  size_t n;
} lo_snap_t;

/* Everything of this user that looks like purlin's, sorted. */
void lo_snapshot(lo_snap_t *s);
void lo_free(lo_snap_t *s);
/* 1 if name is in s. */
int lo_contains(const lo_snap_t *s, const char *name);
/* The pid of a live process that has the entry open (file: fd or mapping; socket: fd), or 0. */
pid_t lo_holder(const char *name);
/* Children of `parent` still alive (for a subreaper parent: every leftover descendant). Writes up
 * to max pids, returns how many there are. */
int lo_children(pid_t parent, pid_t *pids, int max);
/* The command name of a process ("?" if gone). */
void lo_comm(pid_t pid, char *buf, size_t len);
/* The executable's path of a process ("" if unknown). */
void lo_exe(pid_t pid, char *buf, size_t len);

#endif
