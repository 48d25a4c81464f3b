"""Weights into the layouts the kernels want (kernels/include/fk.h).

- fp32: packed in FK_NR=16-column panels, K-major inside a panel, zero-padded past N.
- int8: values in [-127, 127] with one symmetric scale per output column, packed in 16-column
  panels of 4-k groups (`((p*K4/4 + k/4)*16 + j)*4 + k%4`, the vpdpbusd/sdot layout).
- Q4_0: per output column, blocks of 32 weights along K with w = d * (q - 8) (ggml's rounding),
  handled as ggml blocks ``{float32 d; uint8 qs[16]}`` (weight j low nibble of qs[j], j+16
  high) and written as ``fk_panel_q4_0``: per 16-column panel and block, 16 scales then 256
  bytes where chunk h, byte j*4+t holds column j's k=4h+t (low) and k=16+4h+t (high).
Each format can be made from fp32 weights (``quant=...``) or converted from what ONNX Runtime's
quantizers wrote (MatMulInteger weights, MatMulNBits blobs) so the plan computes with the very
same quantized values as the ORT model it was built from.
"""

from __future__ import annotations

import numpy as np

from farm.errors import BuildError

NR = 16
QK = 32
_Q4_BLOCK = np.dtype([("d", "<f4"), ("qs", "u1", (QK // 2,))])
Q4_BLOCK = _Q4_BLOCK  # ggml's {float d; uint8 qs[16]} block, for callers that rescale columns


def pack_f32(w: np.ndarray) -> np.ndarray:
    """[K, N] float32 -> flat panels [ceil(N/16), K, 16]."""
    k, n = w.shape
    panels = (n + NR - 1) // NR
    padded = np.zeros((k, panels * NR), np.float32)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, panels, NR).transpose(1, 0, 2)).reshape(-1)


def pack_i8(wt: np.ndarray) -> np.ndarray:
    """[N, K] int8 rows -> flat panels [ceil(N/16), ceil(K/4), 16, 4], zero-padded."""
    n, k = wt.shape
    panels, k4 = (n + NR - 1) // NR, (k + 3) // 4
    padded = np.zeros((panels * NR, k4 * 4), np.int8)
    padded[:n, :k] = wt
    return np.ascontiguousarray(padded.reshape(panels, NR, k4, 4).transpose(0, 2, 1, 3)).reshape(-1)


def quantize_i8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[K, N] float32 -> ([N, K] int8, [N] float32 scales), symmetric per column."""
    amax = np.abs(w).max(axis=0).astype(np.float32)
    scale = (amax / np.float32(127.0)).astype(np.float32)
    inv = np.divide(np.float32(127.0), amax, out=np.zeros_like(amax), where=amax > 0)
    q = np.rint(w * inv[None, :]).clip(-127, 127).astype(np.int8)
    return np.ascontiguousarray(q.T), scale


def from_matmul_integer(wq: np.ndarray, scale: np.ndarray, zp: np.ndarray | None,
                        where: str) -> tuple[np.ndarray, np.ndarray]:
    """ORT MatMulInteger weights [K, N] (int8/uint8, per-tensor or per-column zero point)."""
    n = wq.shape[1]
    w = wq.astype(np.int16) - (np.zeros(1, np.int16) if zp is None else zp.astype(np.int16))
    if w.min() < -128 or w.max() > 127:
        raise BuildError(f"{where}: weights minus zero point do not fit int8",
                         hint="quantize weights as QInt8 (symmetric)")
    # The kernels need |w| <= 127 (sign trick, no saturation); -128 becomes -127.
    w = np.maximum(w, -127)
    s = np.broadcast_to(np.asarray(scale, np.float32).reshape(-1), (n,)).astype(np.float32)
    return np.ascontiguousarray(w.astype(np.int8).T), np.ascontiguousarray(s)


def _pack_q4(d: np.ndarray, q: np.ndarray) -> np.ndarray:
    """d [N, nb] float32, q [N, nb, 32] values 0..15 -> flat uint8 blocks."""
    n, nb, _ = q.shape
    blocks = np.zeros((n, nb), _Q4_BLOCK)
    blocks["d"] = d
    blocks["qs"] = (q[:, :, : QK // 2] | (q[:, :, QK // 2 :] << 4)).astype(np.uint8)
    return blocks.reshape(-1).view(np.uint8).copy()


def pack_q4_panels(blocks: np.ndarray, n: int) -> np.ndarray:
    """ggml Q4_0 blocks [N, nb*20] bytes -> flat fk_panel_q4_0 [ceil(N/16), nb] bytes."""
    raw = np.ascontiguousarray(blocks, np.uint8).reshape(n, -1).view(_Q4_BLOCK)  # [N, nb]
    nb, panels = raw.shape[1], (n + NR - 1) // NR
    d = np.zeros((panels * NR, nb), np.float32)
    d[:n] = raw["d"]
    q = np.full((panels * NR, nb, QK), 8, np.uint8)
    q[:n, :, : QK // 2] = raw["qs"] & 0x0F
    q[:n, :, QK // 2 :] = raw["qs"] >> 4
    qp = q.reshape(panels, NR, nb, QK).transpose(0, 2, 1, 3)  # [P, nb, 16 cols, 32 k]
    lo = qp[..., : QK // 2].reshape(panels, nb, NR, 4, 4).transpose(0, 1, 3, 2, 4)
    hi = qp[..., QK // 2 :].reshape(panels, nb, NR, 4, 4).transpose(0, 1, 3, 2, 4)
    qs = (lo | (hi << 4)).reshape(panels, nb, 4 * NR * 4)
    out = np.zeros((panels, nb), np.dtype([("d", "<f4", (NR,)), ("qs", "u1", (NR * QK // 2,))]))
    out["d"] = d.reshape(panels, NR, nb).transpose(0, 2, 1)
    out["qs"] = qs
    return out.reshape(-1).view(np.uint8).copy()


def quantize_q4_0(w: np.ndarray, where: str) -> np.ndarray:
    """[K, N] float32 -> Q4_0 blocks (ggml's rounding: d = max / -8, q = min(15, x/d + 8.5))."""
    k, n = w.shape
    if k % QK:
        raise BuildError(f"{where}: K={k} is not a multiple of {QK}, needed for 4-bit blocks",
                         hint="build this model with quant='int8' or fp32")
    x = np.ascontiguousarray(w.T).reshape(n, k // QK, QK)
    idx = np.abs(x).argmax(axis=2)
    mx = np.take_along_axis(x, idx[:, :, None], axis=2)[:, :, 0]
    d = (mx / np.float32(-8.0)).astype(np.float32)
    inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(15, (x * inv[:, :, None] + np.float32(8.5)).astype(np.int8)).astype(np.uint8)
    return _pack_q4(d, q)


def from_matmul_nbits(blob: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
                      k: int, n: int, bits: int, block: int, where: str) -> np.ndarray:
    """ORT MatMulNBits (4-bit, symmetric, block a multiple of 32) -> Q4_0 blocks, values
    unchanged: a block of 32 x j weights shares one scale, so it is j Q4_0 blocks with it."""
    if bits != 4 or block <= 0 or block % QK or k % QK:
        raise BuildError(f"{where}: MatMulNBits with bits={bits}, block_size={block}, K={k}",
                         hint="only 4-bit, block_size a multiple of 32 and K a multiple of 32 "
                              "are supported")
    nblk = -(-k // block)  # ORT pads K to whole blocks
    raw = np.asarray(blob, np.uint8).reshape(n, nblk, block // 2)
    q = np.empty((n, nblk, block), np.uint8)
    q[:, :, 0::2] = raw & 0x0F  # element 2i in the low nibble of byte i
    q[:, :, 1::2] = raw >> 4
    if zero_points is not None:
        zp = np.asarray(zero_points).reshape(n, -1).astype(np.uint8)
        nibbles = np.stack([zp & 0x0F, zp >> 4], axis=2).reshape(n, -1)[:, :nblk]
        if not np.all(nibbles == 8):
            raise BuildError(f"{where}: asymmetric 4-bit weights (zero points != 8)",
                             hint="quantize with is_symmetric=True")
    nb, per = k // QK, block // QK
    q = q.reshape(n, nblk * per, QK)[:, :nb]
    d = np.repeat(np.asarray(scales, np.float32).reshape(n, nblk), per, axis=1)[:, :nb]
    return _pack_q4(np.ascontiguousarray(d), np.ascontiguousarray(q))
