"""CUDA arrays' rules that the client and the server both apply: their
flags (cudaArray*, the driver's CUDA_ARRAY3D_* have the same values) and
the sides of a mipmapped array's levels."""
from __future__ import annotations

from rcuda._generated.cuda_enums import MACROS

LAYERED, SURFACE_LOAD_STORE = MACROS["cudaArrayLayered"], MACROS["cudaArraySurfaceLoadStore"]
CUBEMAP, TEXTURE_GATHER = MACROS["cudaArrayCubemap"], MACROS["cudaArrayTextureGather"]
#: The flags rcuda's arrays may have (sparse, deferred-mapping and
#: colour-attachment arrays are a local GPU's).
KNOWN_FLAGS = LAYERED | SURFACE_LOAD_STORE | CUBEMAP | TEXTURE_GATHER


def layered(flags: int) -> bool:
    """Whether depth counts layers (or cubemap faces), not slices."""
    return bool(flags & (LAYERED | CUBEMAP))


def level_sides(width: int, height: int, depth: int, flags: int, level: int) -> tuple[int, int, int]:
    """(width, height, depth) of a level in CUDA's convention (0: a side the
    array does not have): each side halves per level down to 1; layers and
    cubemap faces do not."""
    shrink = lambda side: max(1, side >> level) if side else 0  # noqa: E731
    return shrink(width), shrink(height), depth if layered(flags) else shrink(depth)
