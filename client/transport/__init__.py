"""How the client reaches a remote GPU: the link each GPU's calls travel on
(link.py: what a link offers; lane.py: a TCP lane owned by C; zmq_socket.py:
a ZeroMQ socket, CURVE-encrypted under --auth), the session with a server
(session.py), the Python side of C's fast paths (fast_path.py, native.py)
and copies between servers (peer.py).

Imports only rcuda/ (the shared protocol, errors, keys) and this package.
"""
