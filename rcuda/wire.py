"""Byte layouts and limits that the Python side and the interposer's C
share: the lane's message framing and the records of a launch batch.

This module is the one definition.  native/gen_wire.py turns it into the C
header the interposer is built with (native/build.py runs it at every
build), so C never keeps a copy of its own.  It imports nothing but
`struct`, so the build can load it without rcuda's dependencies.
"""
from __future__ import annotations

import struct

# ---------------------------------------------------------------- lane framing
# A message on a lane (rcuda/lane.py) is the same multipart as on a ZeroMQ
# socket, framed by lengths:
#     PREFIX (header length, number of payload frames),
#     FRAME_LENGTH per payload frame, the header (msgpack), the frames.

PREFIX = struct.Struct("<II")
FRAME_LENGTH = struct.Struct("<Q")

#: Longest header either side accepts (device output rides in a reply's header).
MAX_HEADER = 1 << 20
#: Most payload frames in one message.
MAX_FRAMES = 64
#: Most payload bytes a server reads into memory for one request.  An upload
#: (htod) is read straight into device memory instead and may be larger.
MAX_BUFFERED_PAYLOAD = 1 << 30

#: Request numbers the interposer's C side chooses start here; the Python
#: client counts up from 1, so the two never meet.
C_SEQ_BASE = 1 << 48

#: Spinning for the other side (rcuda/lane.py's SpinPolicy, the server's;
#: native/link.c's, the client's): a wait answered within the window keeps
#: it whole, a later one halves it, and below 1/SPIN_SHRINK_BELOW of the
#: whole it becomes none.
SPIN_SHRINK_BELOW = 16

# ---------------------------------------------------------------- launch batches
# The interposer records launches (and small asynchronous memory operations)
# into a batch per device, sent as one `launches` message: per record a
# LAUNCH_RECORD (fn, shared memory, grid x/y/z, block x/y/z, stream id,
# parameter bytes), then the parameters, padded to 8 bytes.

LAUNCH_RECORD = struct.Struct("<IIIIIIIIQI")

#: Records whose fn is at or above RECORD_FIRST_OP are memory operations,
#: run in the batch's order; no kernel id is that large.
RECORD_FIRST_OP = 0xFFFFFF00
RECORD_MEMSET = 0xFFFFFFFF  # cudaMemsetAsync: MEMSET_FIELDS
RECORD_HTOD = 0xFFFFFFFE    # cudaMemcpyAsync from the program's memory: HTOD_FIELDS, then the bytes
RECORD_DTOD = 0xFFFFFFFD    # cudaMemcpyAsync within one device: DTOD_FIELDS
RECORD_GRAPH = 0xFFFFFFFC   # cudaGraphLaunch of a graph whose work is one run on the server: GRAPH_FIELDS
RECORD_EVENT = 0xFFFFFFFB   # cudaEventRecord in the record's stream: EVENT_FIELDS
RECORD_WAIT = 0xFFFFFFFA    # cudaStreamWaitEvent: the record's stream waits for the event (EVENT_FIELDS)
MEMSET_FIELDS = struct.Struct("<QQI")  # ptr, size, value
HTOD_FIELDS = struct.Struct("<Q")      # dst
DTOD_FIELDS = struct.Struct("<QQQ")    # dst, src, size
GRAPH_FIELDS = struct.Struct("<Q")     # the graph's id: all of its requests (server/graphs.py)
EVENT_FIELDS = struct.Struct("<Q")     # the event's id

# ---------------------------------------------------------------- mapped and managed memory
#: The unit of a mirror's download (`mirror_dtoh`): the server compares its
#: chunks with what the client has (server/mirror_views.py), and a part of
#: a mirror the client asks for starts and ends on one (native/mapped_memory.c).
MIRROR_CHUNK = 256 << 10

# ---------------------------------------------------------------- sealed lanes
# Under --auth a lane's bytes travel in sealed records (rcuda/sealed.py):
#     RECORD_HEAD (plaintext length), the ciphertext, SEAL_TAG bytes of tag;
# AES-256-GCM, the record head as associated data, the record's number in
# its direction as the nonce.  A new sealed lane starts with SEAL_SALT
# random bytes from each side, in clear, the client's first.

RECORD_HEAD = struct.Struct("<I")
#: Most plaintext bytes in one record.
RECORD_MAX = 256 << 10
SEAL_TAG = 16
SEAL_KEY = 32
SEAL_NONCE = 12
SEAL_SALT = 16
#: Records sealed with one key before both sides move to the next.
REKEY_RECORDS = 1 << 20
