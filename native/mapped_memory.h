/* What the rest of the interposer calls of native/mapped_memory.c (mapped
 * host memory), declared ahead of the files that use it. */
#pragma once
#include <stdint.h>

struct link;
struct link_reply;

/* What a synchronisation covers (mirror_before_sync's scope). */
enum { MIRROR_SYNC_DEVICE = 0, MIRROR_SYNC_STREAM = 1, MIRROR_SYNC_EVENT = 2 };

/* What a synchronising request's reply will mean for the mirrors of its
 * device: filled before the request is sent, used once its reply came. */
struct mirror_sync {
    uint64_t written; /* device-side writes noted before the request went out */
    int pending;      /* some may not be in the host's copies yet: refresh after the reply */
    int covers;       /* the synchronisation covers all of them */
};

static int mirror_flush(struct link *l);
static void mirror_note_write(int device, uint64_t stream);
static int mirror_overlaps(uint64_t address, uint64_t size);
static void mirror_before_sync(int device, int scope, uint64_t stream, struct mirror_sync *token);
static int mirror_after_sync(int device, struct link *l, const struct mirror_sync *token, struct link_reply *reply);
static void mirror_before_fork(void);
static void mirror_after_fork(void);
