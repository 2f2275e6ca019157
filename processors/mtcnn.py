"""Batched MTCNN face detector (P-Net, R-Net, O-Net as ONNX graphs): three model calls per batch.

MTCNN (Zhang et al. 2016, "Joint Face Detection and Alignment using Multi-task Cascaded
Convolutional Networks") finds faces with a 12 px proposal network slid over an image pyramid
(P-Net), then rescores and regresses the proposals on 24 px crops (R-Net) and on 48 px crops,
which also gives five landmarks: both eyes, the nose tip and both mouth corners (O-Net).

The weights are the ONNX exports of the original networks carried in the wheel of
``mtcnn-runtime==1.0.0`` (Apache-2.0); ``scripts/models`` extracts the three files into the model
home, pinned by SHA-256 in ``processors/models.json`` (that package is never installed: it
depends on the CPU build of ONNX Runtime). Its conventions, which this module follows: RGB input,
``(x - 127.5) / 128``, P-Net on a 12 px window with stride 2 and box offsets relative to the
window's ``size + 1``.

Batched here, instead of per image:

- every image is placed on the same square canvas (``side`` px, longer side scaled to it,
  letterboxed), and the whole pyramid of the whole batch goes through P-Net **once**: the
  pyramid levels are packed side by side into one mosaic (:func:`pyramid_layout`, 12 px gaps; a
  window that straddles two levels is discarded), built by one ``cv2.resize`` per level for all
  images (channels stacked);
- R-Net gets every image's proposals in **one** call and O-Net every survivor in **one** call;
  the crops are taken by one vectorised bilinear gather per stage (:func:`crops`), each box from
  the pyramid level where it is closest to the crop size (no aliasing from a 300 px box squeezed
  into 24 px);
- non-maximum suppression runs for all images at once (``cv2.dnn.NMSBoxesBatched``, the image
  index as the class; the last one, after O-Net, by intersection over the smaller box as the
  reference code does, :data:`FINAL_NMS`).

So a batch costs three ONNX Runtime calls and a fixed number of vectorised NumPy/OpenCV calls,
whatever its size or number of proposals.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from processors.models import pinned_model
from processors.runtime import BatchedModel, RuntimeSettings

#: P-Net's window (px) and the stride of its output map (px), from the MTCNN paper.
PNET_WINDOW = 12
PNET_STRIDE = 2
#: Pyramid step: each level is ``1/sqrt(2)`` of the previous one (0.709 in the paper's code).
PYRAMID_FACTOR = 0.7071
#: Empty px between pyramid levels in the mosaic: a full P-Net window.
MOSAIC_GAP = PNET_WINDOW
#: Crop sides (px) of R-Net and O-Net.
RNET_SIDE = 24
ONET_SIDE = 48
#: Face probability thresholds per stage and NMS overlap thresholds (within a level, across
#: levels, after R-Net: IoU; after O-Net: intersection over the smaller box, :data:`FINAL_NMS`).
#: The reference implementation keeps O-Net scores above 0.7; here 0.9: at 0.7 an astronaut's
#: orange suit on a 12 MP frame scored 0.72 as a 2000 px face, while the real faces of the
#: benchmarks' portraits score above 0.99.
THRESHOLDS = (0.7, 0.7, 0.9)
NMS_IOU = (0.5, 0.7, 0.7, 0.7)
#: How the last NMS (after O-Net) measures overlap: ``"min"``, the intersection over the smaller
#: box's area, as the reference code does (Zhang et al.'s MATLAB ``detect_face``, facenet's
#: ``detect_face.py``: ``nms(total_boxes, 0.7, 'Min')``). Two O-Net boxes of one face, regressed
#: from proposals of two pyramid levels, can nest with a low IoU: on scikit-image's astronaut
#: with the exposure raised x1.4 a 88 px box lay 99 % inside the 98 px one (IoU 0.62 < 0.7) and
#: the upload was rejected ``MULTIPLE_FACES`` (issue 39); two faces side by side overlap 0.
FINAL_NMS = "min"
#: Largest number of proposals per image kept after P-Net (highest scores first).
MAX_PROPOSALS = 400
#: Batch buckets of the three nets (their own, not U2-Net's): inputs are padded to the next one.
MTCNN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Model names in ``processors/models.json``.
MODELS = ("mtcnn_pnet", "mtcnn_rnet", "mtcnn_onet")


@dataclass(frozen=True, slots=True)
class Faces:
    """The faces MTCNN found in one image, highest score first (canvas px of that image).

    Attributes:
        boxes: ``(K, 4) float32`` ``x1, y1, x2, y2`` (px, ends inclusive as in MTCNN).
        scores: ``(K,) float32`` O-Net face probability in ``[0, 1]``.
        landmarks: ``(K, 5, 2) float32`` ``(x, y)`` px of the left eye, right eye, nose tip, left
            and right mouth corner (left and right as seen in the image).
    """

    boxes: np.ndarray
    scores: np.ndarray
    landmarks: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    def scaled(self, factor: float, dx: float = 0.0, dy: float = 0.0) -> Faces:
        """The same faces in another image's px: ``p * factor + (dx, dy)``."""
        off = np.array([dx, dy], np.float32)
        return Faces((self.boxes * factor + np.tile(off, 2)).astype(np.float32), self.scores,
                     (self.landmarks * factor + off).astype(np.float32))


NO_FACES = Faces(np.zeros((0, 4), np.float32), np.zeros(0, np.float32),
                 np.zeros((0, 5, 2), np.float32))


@dataclass(frozen=True, slots=True)
class Level:
    """One pyramid level in the mosaic: the canvas scaled by ``scale`` to ``side`` px, at
    ``(x, y)`` px of the mosaic."""

    scale: float
    side: int
    x: int
    y: int


def pyramid_layout(canvas: int, min_face: float) -> tuple[list[Level], int, int]:
    """Pyramid levels of a ``canvas`` px square packed into one mosaic (shelf packing).

    Level ``k`` has scale ``(PNET_WINDOW / min_face) * PYRAMID_FACTOR**k`` and exists while its
    side is at least :data:`PNET_WINDOW`; so faces from ``min_face`` px to the canvas size are
    seen at 12-17 px by P-Net on some level. Levels are placed on shelves from the largest down,
    :data:`MOSAIC_GAP` px apart, in a mosaic as wide as the two largest levels.

    Returns:
        ``(levels, height, width)`` of the mosaic (px).
    """
    s0 = PNET_WINDOW / min_face
    levels: list[Level] = []
    sides = []
    k = 0
    while (side := int(np.ceil(canvas * s0 * PYRAMID_FACTOR**k))) >= PNET_WINDOW:
        sides.append(side)
        k += 1
    width = sides[0] + (MOSAIC_GAP + sides[1] if len(sides) > 1 else 0)
    x = y = shelf = 0
    for side in sides:
        if x and x + side > width:  # next shelf
            x, y, shelf = 0, y + shelf + MOSAIC_GAP, 0
        levels.append(Level(side / canvas, side, x, y))
        x += side + MOSAIC_GAP
        shelf = max(shelf, side)
    return levels, y + shelf, width


def crops(mosaic: np.ndarray, levels: Sequence[Level], image_idx: np.ndarray, boxes: np.ndarray,
          side: int) -> np.ndarray:
    """Square crops of ``boxes`` resized to ``side`` px, for R-Net / O-Net, in one ``cv2.remap``.

    Each box is read from the pyramid level where it spans at least ``side`` px but least so
    (a shrink by at most 1/``PYRAMID_FACTOR``, bilinear), so large boxes are not aliased. Outside
    the canvas is 0 (black after normalisation: -1), as MTCNN pads. The batch's mosaics are one
    tall image (``(N * Hm, Wm, 3)``, a free reshape) and every crop's sampling grid one block of
    rows of the map.

    Args:
        mosaic: ``(N, Hm, Wm, 3) uint8`` the pyramid mosaics of the batch.
        levels: the mosaic's levels (:func:`pyramid_layout`).
        image_idx: ``(K,) int`` image of each box.
        boxes: ``(K, 4) float32`` ``x1, y1, x2, y2`` canvas px (inclusive ends).
        side: crop side (px).

    Returns:
        ``(K, 3, side, side) float32`` normalised network input.
    """
    k = len(boxes)
    n, hm, wm = mosaic.shape[:3]
    scales = np.array([lv.scale for lv in levels], np.float32)
    size = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) + 1.0  # (K,)
    # the smallest level on which the box still spans >= side px (level 0 when none does)
    ok = size[:, None] * scales[None, :] >= side
    lv = np.where(ok.any(axis=1), ok.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1), 0)
    s = scales[lv][:, None]
    ox = np.array([v.x for v in levels], np.float32)[lv][:, None]
    oy = np.array([v.y for v in levels], np.float32)[lv][:, None]
    lim = np.array([v.side for v in levels], np.float32)[lv][:, None]
    t = (np.arange(side, dtype=np.float32) + 0.5) / side  # sample centres in [0, 1]
    w = (boxes[:, 2] - boxes[:, 0] + 1.0)[:, None]
    h = (boxes[:, 3] - boxes[:, 1] + 1.0)[:, None]
    # level px of the sample centres (pixel centres at integers), (K, side) each
    xs = (boxes[:, 0:1] + t[None, :] * w) * s - 0.5
    ys = (boxes[:, 1:2] + t[None, :] * h) * s - 0.5
    off = -2.0 * (hm + wm)  # far outside: remap's constant border (0)
    mx = np.where((xs > -1.0) & (xs < lim), xs + ox, off).astype(np.float32)
    my = np.where((ys > -1.0) & (ys < lim), ys + oy + image_idx[:, None] * hm, off)
    map_x = np.broadcast_to(mx[:, None, :], (k, side, side)).reshape(k * side, side)
    map_y = np.broadcast_to(my.astype(np.float32)[:, :, None],
                            (k, side, side)).reshape(k * side, side)
    tall = mosaic.reshape(n * hm, wm, 3)
    step = 32000 // side * side  # remap's map is at most SHRT_MAX rows
    out = np.concatenate([cv2.remap(tall, map_x[r:r + step], map_y[r:r + step], cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_CONSTANT, borderValue=0)
                          for r in range(0, k * side, step)]) if k else np.zeros((0, side, 3))
    x = np.ascontiguousarray(out.reshape(k, side, side, 3).transpose(0, 3, 1, 2), np.float32)
    x -= 127.5
    x *= 1.0 / 128.0
    return x


def _square(boxes: np.ndarray) -> np.ndarray:
    """MTCNN's ``convert_to_square``: the square of the longer side around each box's centre."""
    w = boxes[:, 2] - boxes[:, 0] + 1.0
    h = boxes[:, 3] - boxes[:, 1] + 1.0
    m = np.maximum(w, h)
    x1 = boxes[:, 0] + 0.5 * w - 0.5 * m
    y1 = boxes[:, 1] + 0.5 * h - 0.5 * m
    return np.stack([x1, y1, x1 + m - 1.0, y1 + m - 1.0], axis=1)


def _calibrate(boxes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """MTCNN's box regression: each edge moves by its offset times the box's size + 1."""
    w = boxes[:, 2] - boxes[:, 0] + 1.0
    h = boxes[:, 3] - boxes[:, 1] + 1.0
    return boxes + offsets * np.stack([w, h, w, h], axis=1)


def _nms(boxes: np.ndarray, scores: np.ndarray, groups: np.ndarray, iou: float,
         mode: str = "union") -> np.ndarray:
    """Indices kept by per-group non-maximum suppression, by descending score.

    Args:
        boxes: ``(K, 4)`` ``x1, y1, x2, y2`` px (ends inclusive).
        scores: ``(K,)`` scores.
        groups: ``(K,)`` int group of each box (the image, or image and level): boxes of
            different groups never suppress each other.
        iou: overlap above which the lower-scored box is dropped.
        mode: ``"union"``: overlap = IoU (``cv2.dnn.NMSBoxesBatched``); ``"min"``: overlap =
            intersection over the smaller box's area (the reference MTCNN's ``'Min'``; a box
            nested in a bigger one overlaps 1.0 whatever their sizes).

    Returns:
        ``(M,) intp`` indices into ``boxes``.
    """
    if not len(boxes):
        return np.zeros(0, np.intp)
    if mode == "min":
        return _nms_min(boxes, scores, groups, iou)
    xywh = np.stack([boxes[:, 0], boxes[:, 1], boxes[:, 2] - boxes[:, 0] + 1.0,
                     boxes[:, 3] - boxes[:, 1] + 1.0], axis=1).astype(np.float32)
    kept = cv2.dnn.NMSBoxesBatched(xywh.tolist(), scores.astype(np.float32).tolist(),
                                   groups.astype(np.int32).tolist(), 0.0, iou)
    keep = np.asarray(kept, np.intp).reshape(-1)
    return keep[np.argsort(-scores[keep], kind="stable")]


def _nms_min(boxes: np.ndarray, scores: np.ndarray, groups: np.ndarray,
             overlap: float) -> np.ndarray:
    """:func:`_nms` with ``mode="min"``: greedy, highest score first (NumPy; few boxes)."""
    area = (boxes[:, 2] - boxes[:, 0] + 1.0) * (boxes[:, 3] - boxes[:, 1] + 1.0)
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    while len(order):
        i, rest = order[0], order[1:]
        kept.append(int(i))
        w = np.minimum(boxes[i, 2], boxes[rest, 2]) - np.maximum(boxes[i, 0], boxes[rest, 0]) + 1.0
        h = np.minimum(boxes[i, 3], boxes[rest, 3]) - np.maximum(boxes[i, 1], boxes[rest, 1]) + 1.0
        inter = np.maximum(w, 0.0) * np.maximum(h, 0.0)
        over = inter / np.maximum(np.minimum(area[i], area[rest]), 1e-9)
        order = rest[(over <= overlap) | (groups[rest] != groups[i])]
    return np.asarray(kept, np.intp)


class Mtcnn:
    """Batched MTCNN on a square canvas.

    Args:
        runtime: ONNX Runtime settings (provider, buckets); the three graphs are
            :class:`~processors.runtime.BatchedModel` instances shared process-wide.
        canvas: side (px) of the square canvas every image is placed on.
        min_face: smallest face searched, in canvas px (>= 12; smaller faces than P-Net's
            window are not seen).

    Raises:
        ModelError: a weight file is missing (``make models``) or fails its SHA-256 pin.
    """

    def __init__(self, runtime: RuntimeSettings, canvas: int = 320, min_face: float = 12.0) -> None:
        # small nets: R-Net and O-Net take every crop of a batch (often 50-300) in one call
        rt = runtime.model_copy(update={"buckets": MTCNN_BUCKETS, "max_bucket": None,
                                        "cpu_max_bucket": MTCNN_BUCKETS[-1]})

        def load(name: str, symbolic: bool) -> BatchedModel:
            return BatchedModel.shared(*pinned_model(name), rt, name, make_batch_symbolic=symbolic)

        self.pnet = load(MODELS[0], True)
        self.rnet = load(MODELS[1], False)
        self.onet = load(MODELS[2], False)
        self.canvas = canvas
        self.last_inference_ms = 0.0
        self.levels, self.mosaic_h, self.mosaic_w = pyramid_layout(canvas, max(min_face, 12.0))
        for m in (self.pnet, self.rnet, self.onet):  # no warm-up sweep: the largest bucket
            m.chosen_bucket = m.buckets[-1]

    @property
    def models(self) -> tuple[BatchedModel, BatchedModel, BatchedModel]:
        """P-Net, R-Net, O-Net."""
        return self.pnet, self.rnet, self.onet

    def mosaic(self, images_rgb: Sequence[np.ndarray]) -> np.ndarray:
        """The pyramid mosaics of a batch: ``(N, Hm, Wm, 3) uint8``.

        Args:
            images_rgb: N images ``(h, w, 3) uint8`` RGB with ``max(h, w) == canvas``... or less:
                each sits at the canvas's top-left corner, the rest is 0.
        """
        n, c = len(images_rgb), self.canvas
        stack = np.zeros((c, c, 3 * n), np.uint8)  # channels of all images side by side
        for i, im in enumerate(images_rgb):
            stack[: im.shape[0], : im.shape[1], 3 * i : 3 * i + 3] = im
        out = np.zeros((self.mosaic_h, self.mosaic_w, 3 * n), np.uint8)
        prev: np.ndarray = stack
        for lv in self.levels:  # each level from the previous one: a shrink by <= 1/0.707
            if prev.shape[0] != lv.side:
                prev = cv2.resize(prev, (lv.side, lv.side), interpolation=cv2.INTER_LINEAR)
                prev = prev.reshape(lv.side, lv.side, 3 * n)
            out[lv.y : lv.y + lv.side, lv.x : lv.x + lv.side] = prev
        return np.ascontiguousarray(out.reshape(self.mosaic_h, self.mosaic_w, n, 3)
                                    .transpose(2, 0, 1, 3))

    def detect(self, images_rgb: Sequence[np.ndarray]) -> list[Faces]:
        """Faces of every image, in canvas px, with three model calls for the whole batch
        (their wall time in ``last_inference_ms``).

        Args:
            images_rgb: N >= 1 images ``(h, w, 3) uint8`` RGB, ``h, w <= canvas`` (the caller
                scales an upload's longer side to the canvas).

        Returns:
            N :class:`Faces`, in px of each given image.
        """
        n = len(images_rgb)
        self.last_inference_ms = 0.0
        if n == 0:
            return []
        mosaic = self.mosaic(images_rgb)
        x = np.ascontiguousarray(mosaic.transpose(0, 3, 1, 2), np.float32)
        x -= 127.5
        x *= 1.0 / 128.0
        offsets, probs = self._run(self.pnet, x)[:2]
        prop_img, prop_lv, boxes, scores, offs = self._proposals(offsets, probs[:, 1])
        keep = _nms(boxes, scores, prop_img * len(self.levels) + prop_lv, NMS_IOU[0])
        keep = keep[_nms(boxes[keep], scores[keep], prop_img[keep], NMS_IOU[1])]
        keep = self._cap(keep, prop_img)
        img = prop_img[keep]
        boxes = np.round(_square(_calibrate(boxes[keep], offs[keep])))
        if not len(boxes):
            return [NO_FACES] * n
        # R-Net
        r_off, r_prob = self._run(self.rnet, crops(mosaic, self.levels, img, boxes, RNET_SIDE))[:2]
        sel = r_prob[:, 1] > THRESHOLDS[1]
        img, boxes, scores, r_off = img[sel], boxes[sel], r_prob[sel, 1], r_off[sel]
        keep = _nms(boxes, scores, img, NMS_IOU[2])
        img = img[keep]
        boxes = np.round(_square(_calibrate(boxes[keep], r_off[keep])))
        if not len(boxes):
            return [NO_FACES] * n
        # O-Net
        marks, o_off, o_prob = self._run(self.onet,
                                         crops(mosaic, self.levels, img, boxes, ONET_SIDE))[:3]
        sel = o_prob[:, 1] > THRESHOLDS[2]
        img, boxes, scores = img[sel], boxes[sel], o_prob[sel, 1]
        o_off, marks = o_off[sel], marks[sel]
        w = boxes[:, 2] - boxes[:, 0] + 1.0
        h = boxes[:, 3] - boxes[:, 1] + 1.0
        pts = np.stack([boxes[:, 0:1] + w[:, None] * marks[:, 0:5],
                        boxes[:, 1:2] + h[:, None] * marks[:, 5:10]], axis=2)
        boxes = _calibrate(boxes, o_off)
        keep = _nms(boxes, scores, img, NMS_IOU[3], FINAL_NMS)
        img, boxes, scores, pts = img[keep], boxes[keep], scores[keep], pts[keep]
        return [Faces(boxes[img == i].astype(np.float32), scores[img == i].astype(np.float32),
                      pts[img == i].astype(np.float32)) for i in range(n)]

    def _run(self, model: BatchedModel, x: np.ndarray) -> list[np.ndarray]:
        """``model.run(x)``, its wall time added to ``last_inference_ms``."""
        t0 = time.perf_counter()
        out = model.run(x)
        self.last_inference_ms += (time.perf_counter() - t0) * 1000.0
        return out

    def _proposals(self, offsets: np.ndarray, prob: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """P-Net windows above threshold whose 12 px window lies inside one level.

        Args:
            offsets: ``(N, 4, h, w) float32`` box offsets of the mosaic's output map.
            prob: ``(N, h, w) float32`` face probability.

        Returns:
            ``(image, level, boxes (K, 4) canvas px, scores (K,), offsets (K, 4))``.
        """
        n_i, oy, ox = np.nonzero(prob > THRESHOLDS[0])
        # window corners in mosaic px
        mx, my = ox * PNET_STRIDE, oy * PNET_STRIDE
        lx = np.array([lv.x for lv in self.levels])
        ly = np.array([lv.y for lv in self.levels])
        ls = np.array([lv.side for lv in self.levels])
        inside = ((mx[:, None] >= lx) & (mx[:, None] + PNET_WINDOW <= lx + ls)
                  & (my[:, None] >= ly) & (my[:, None] + PNET_WINDOW <= ly + ls))  # (K, L)
        has = inside.any(axis=1)
        n_i, oy, ox, mx, my = n_i[has], oy[has], ox[has], mx[has], my[has]
        lv = np.argmax(inside[has], axis=1)
        scale = np.array([v.scale for v in self.levels], np.float32)[lv]
        # MTCNN's window box: ((stride * x + 1) / scale, ...), size 12 / scale, rounded
        x1 = np.round((mx - lx[lv] + 1.0) / scale)
        y1 = np.round((my - ly[lv] + 1.0) / scale)
        x2 = np.round((mx - lx[lv] + 1.0 + PNET_WINDOW) / scale)
        y2 = np.round((my - ly[lv] + 1.0 + PNET_WINDOW) / scale)
        boxes = np.stack([x1, y1, x2, y2], axis=1).astype(np.float32)
        return (n_i, lv, boxes, prob[n_i, oy, ox],
                offsets[n_i, :, oy, ox].astype(np.float32))

    @staticmethod
    def _cap(keep: np.ndarray, image: np.ndarray) -> np.ndarray:
        """At most :data:`MAX_PROPOSALS` of ``keep`` (sorted by score) per image."""
        img = image[keep]
        order = np.argsort(img, kind="stable")  # stable: score order within each image
        ranks = np.empty(len(keep), np.intp)
        starts = np.searchsorted(img[order], img[order])
        ranks[order] = np.arange(len(keep)) - starts
        return keep[ranks < MAX_PROPOSALS]
