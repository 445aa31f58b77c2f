"""Pathfinder and Path-X, drawn procedurally: are the two markers joined by one dashed contour?

In the spirit of the Pathfinder challenge (Linsley et al. 2018; Kim*, Linsley* et al. 2020) that
LRA uses (Pathfinder 32x32, Path-X 128x128, the hardest level with contours of 14 paddles), but
drawn by this file, not by the original generator: the images differ in detail (no
anti-aliasing, one-pixel paddles, uniform contrast), so scores are not comparable with LRA's.

Each image holds two long contours of ``contour_length`` paddles and ``num_distractors`` short
unmarked ones of ``distractor_length`` paddles. A contour is a chain of paddles (``paddle_length``
pixels drawn, then ``paddle_margin`` pixels left blank), its direction turning by at most
``max_turn`` degrees from one paddle to the next. Two square markers of side
``2 * marker_radius + 1`` sit on contour ends: both on the ends of the first long contour (label
1, connected), or one on an end of each long contour (label 0). Both classes have the same
number of contours and markers, so only the connection tells them apart.

The label is correct by construction, and checkable: consecutive paddles of a contour are within
Chebyshev distance ``r = paddle_margin + 1`` of each other, and every pixel of a contour is at
least ``r + 1`` from every pixel of any other (placement is rejected otherwise). So a flood fill
that joins drawn pixels closer than ``r`` reaches the second marker exactly when the label is 1.
Markers are the only full squares of their size in an image (also enforced), so they can be found
from the pixels alone.

Images are flattened row by row (pixel by pixel, length ``image_size**2``). ``encoding="real"``
gives one feature per step, ``(pixel/255 - 0.5)/0.5`` in [-1, 1] (the S4/S5 normalisation);
``encoding="tokens"`` gives LRA's integer pixels, shifted by one because 0 is padding here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from scipy import ndimage

from . import _generated, _util
from ._base import Split, TaskInfo
from ._registry import TaskSpec

Encoding = Literal["real", "tokens"]
ENCODINGS: tuple[str, ...] = ("real", "tokens")
_RESTARTS = 200  # whole-image redraws before the settings are declared not to fit
_CONTOUR_TRIES = 20  # contours started before the image is redrawn
_TURN_TRIES = 10  # angles a paddle tries before its contour gives up


@dataclasses.dataclass(frozen=True)
class PathfinderConfig(_generated.GeneratedConfig):
    """Options of the generated Pathfinder task (`tasks._generated.GeneratedConfig` plus these;
    defaults: LRA's Pathfinder 32, hardest level, split 80/10/10 of 200000 images).

    Attributes:
        image_size: side of the square image in pixels (sequence length is its square).
        contour_length: paddles in each of the two long contours (LRA hardest: 14).
        paddle_length: pixels drawn per paddle.
        paddle_margin: blank pixels between consecutive paddles.
        num_distractors: short unmarked contours.
        distractor_length: paddles per distractor (LRA: contour_length // 3).
        max_turn: largest change of direction between paddles, in degrees. It stands in for
            the original generator's ``continuity`` (LRA: 1.0 at 32x32, 1.8 at 128x128), whose
            angle scale differs; 60 (Path-X: 45) is chosen so that 14-paddle contours fit the
            image often enough to draw quickly, not calibrated against LRA's images.
        marker_radius: markers are squares of side ``2 * marker_radius + 1``.
        encoding: ``"real"`` (normalised pixels, one feature) or ``"tokens"`` (pixel + 1).
    """

    num_train: int = 160_000
    num_val: int = 20_000
    num_test: int = 20_000
    image_size: int = 32
    contour_length: int = 14
    paddle_length: int = 2
    paddle_margin: int = 1
    num_distractors: int = 5
    distractor_length: int = 4
    max_turn: float = 60.0
    marker_radius: int = 1
    encoding: Encoding = "real"

    task = "pathfinder"

    def __post_init__(self):
        super().__post_init__()
        w = self.task
        _util.integer(f"{w}.image_size", self.image_size, low=8, high=512)
        _util.integer(f"{w}.contour_length", self.contour_length, low=1)
        _util.integer(f"{w}.paddle_length", self.paddle_length, low=1)
        _util.integer(f"{w}.paddle_margin", self.paddle_margin, low=1)
        _util.integer(f"{w}.num_distractors", self.num_distractors, low=0)
        _util.integer(f"{w}.distractor_length", self.distractor_length, low=1)
        _util.number(f"{w}.max_turn", self.max_turn, low=0.0, high=180.0)
        _util.integer(f"{w}.marker_radius", self.marker_radius, low=1)
        _util.choice(f"{w}.encoding", self.encoding, ENCODINGS)
        if 2 * self.marker_radius + 1 >= self.image_size // 2:
            raise ValueError(
                f"{w}.marker_radius={self.marker_radius} is too large for image_size="
                f"{self.image_size}; use a radius below image_size / 4."
            )


@dataclasses.dataclass(frozen=True)
class PathXConfig(PathfinderConfig):
    """Path-X: Pathfinder at 128x128 with paddles scaled up (the LRA Path-X setting)."""

    image_size: int = 128
    contour_length: int = 14
    paddle_length: int = 6
    paddle_margin: int = 3
    num_distractors: int = 7
    distractor_length: int = 4
    max_turn: float = 45.0
    marker_radius: int = 3


def _grow(
    u: Callable[[], float],
    cfg: PathfinderConfig,
    paddles: int,
    blocked: np.ndarray,
    starts: np.ndarray,
) -> list[tuple[int, int]] | None:
    """The drawn pixels (row, column) of one contour in drawing order, or None if it got stuck.

    Grown paddle by paddle: each paddle turns by a uniform angle in [-max_turn, max_turn] and is
    kept if every pixel it draws is inside the image (``marker_radius`` clear of the border)
    and not ``blocked``; a paddle tries a few angles before the contour gives up.
    """
    P, M = cfg.paddle_length, cfg.paddle_margin
    low, high = cfg.marker_radius, cfg.image_size - 1 - cfg.marker_radius
    y0, x0 = divmod(int(starts[int(u() * len(starts))]), cfg.image_size)
    heading = 2.0 * math.pi * u()
    max_turn = math.radians(cfg.max_turn)
    pixels = [(y0, x0)]
    y, x = float(y0), float(x0)
    for k in range(paddles):
        # The first paddle starts at the start pixel; later ones after M blank steps.
        blank, drawn = (0, P - 1) if k == 0 else (M, P)
        for _ in range(_TURN_TRIES):
            h = heading if k == 0 else heading + max_turn * (2.0 * u() - 1.0)
            dy, dx = math.sin(h), math.cos(h)
            new = []
            for j in range(1, blank + drawn + 1):
                # floor(v + 1/2): unit steps stay unit steps in Chebyshev distance (round()
                # would not: it rounds halves to even).
                py, px = math.floor(y + j * dy + 0.5), math.floor(x + j * dx + 0.5)
                if j > blank:
                    if not (low <= py <= high and low <= px <= high) or blocked[py, px]:
                        break
                    new.append((py, px))
            else:
                break
        else:
            return None
        heading = h
        y, x = y + (blank + drawn) * dy, x + (blank + drawn) * dx
        pixels.extend(new)
    return pixels


def _marker(centre: tuple[int, int], radius: int) -> list[tuple[int, int]]:
    cy, cx = centre
    span = range(-radius, radius + 1)
    return [(cy + dy, cx + dx) for dy in span for dx in span]


def draw(
    rng: np.random.Generator, cfg: PathfinderConfig, connected: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One image ``(S, S) uint8`` (0 or 255) and its two marker centres ``(2, 2)`` (row, col).

    ``connected``: whether both markers go on the ends of one contour (label 1).
    """
    S, r, m = cfg.image_size, cfg.paddle_margin + 1, cfg.marker_radius
    u = _util.uniforms(rng, block=4096).__next__
    # (paddles, ends to mark): the two long contours, then the distractors.
    marks = [2, 0] if connected else [1, 1]
    plan = [(cfg.contour_length, marks[0]), (cfg.contour_length, marks[1])]
    plan += [(cfg.distractor_length, 0)] * cfg.num_distractors
    square = np.ones((2 * m + 1, 2 * m + 1), dtype=bool)
    inside = np.zeros((S, S), dtype=bool)
    inside[m : S - m, m : S - m] = True
    for _ in range(_RESTARTS):
        image = np.zeros((S, S), dtype=bool)
        blocked = np.zeros((S, S), dtype=bool)
        centres: list[tuple[int, int]] = []
        for paddles, n_marks in plan:
            starts = np.flatnonzero(inside & ~blocked)
            for _ in range(_CONTOUR_TRIES):
                pixels = None if starts.size == 0 else _grow(u, cfg, paddles, blocked, starts)
                if pixels is None:
                    continue
                ends = [pixels[0], pixels[-1]]
                chosen = ends if n_marks == 2 else ([ends[int(u() * 2)]] if n_marks else [])
                stamp = pixels + [p for c in chosen for p in _marker(c, m)]
                rows, cols = np.array(stamp).T
                if blocked[rows, cols].any():
                    continue
                image[rows, cols] = True
                # Every later pixel must stay more than r away from this contour.
                blocked = ndimage.maximum_filter(image, size=2 * r + 1)
                centres.extend(chosen)
                break
            else:
                break  # this contour found no room: redraw the whole image
        else:
            found = ndimage.binary_erosion(image, structure=square)
            want = np.zeros_like(found)
            for cy, cx in centres:
                want[cy, cx] = True
            if np.array_equal(found, want):  # the markers are the only full squares
                return image.astype(np.uint8) * 255, np.array(centres)
    raise RuntimeError(
        f"pathfinder: could not fit {len(plan)} contours in a {S}x{S} image after "
        f"{_RESTARTS} attempts; reduce contour_length, num_distractors or paddle sizes."
    )


CHUNK = 1000  # images per independently seeded chunk


def _chunk(
    cfg: PathfinderConfig, split: str, index: int, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(size, S*S) uint8`` and labels of chunk ``index`` of ``split``."""
    g = _util.rng(cfg.seed, split, index)
    # Exactly balanced classes (to one image) in a random order.
    labels = g.permutation(np.arange(size) % 2).astype(np.int32)
    images = np.empty((size, cfg.image_size**2), dtype=np.uint8)
    for i, label in enumerate(labels):
        images[i] = draw(g, cfg, bool(label))[0].reshape(-1)
    return images, labels


def make(cfg: PathfinderConfig) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for split, n in cfg.sizes.items():
        # Each chunk has its own seed stream: chunks are independent of one another (a
        # paper-scale split could be drawn in parallel with the same result; here it is not).
        parts = [_chunk(cfg, split, k, min(CHUNK, n - start))
                 for k, start in enumerate(range(0, n, CHUNK))]
        # Pixels are stored as uint8 (4x smaller than float32); `decode_pixels` normalises them.
        arrays[f"{split}/inputs"] = np.concatenate([p[0] for p in parts])
        arrays[f"{split}/labels"] = np.concatenate([p[1] for p in parts])
        arrays[f"{split}/lengths"] = np.full(n, cfg.image_size**2, dtype=np.int32)
    return arrays


def decode_pixels(
    pixels: np.ndarray, encoding: str, mean: float = 0.5, std: float = 0.5
) -> np.ndarray:
    """uint8 pixels ``(n, L)`` -> the contract's inputs: ``(n, L, 1)`` float32
    ``(pixel/255 - mean)/std`` (the defaults map onto [-1, 1]), or ``(n, L)`` int32 tokens
    ``pixel + 1``."""
    if encoding == "real":
        return ((pixels.astype(np.float32) / 255.0 - mean) / std)[..., None]
    if encoding == "tokens":
        return pixels.astype(np.int32) + 1
    raise ValueError(f"encoding={encoding!r} is not accepted; accepted values: {list(ENCODINGS)}.")


def pixel_spec(
    name: str,
    description: str,
    side: Callable[[Any], int],
    classes: int = 2,
    normalise: tuple[float, float] = (0.5, 0.5),
    **fields: Any,
) -> TaskSpec:
    """The `TaskSpec` of a square image stored as uint8 pixels and read pixel by pixel (here,
    `tasks.lra_pathfinder`, `tasks.lra_image`): ``side(config) ** 2`` steps, ``classes``
    classes, inputs by `decode_pixels` with the config's ``encoding`` and ``normalise = (mean,
    std)``; ``fields`` are the spec's other fields."""

    def info(cfg: Any, arrays=None) -> TaskInfo:
        tokens = cfg.encoding == "tokens"
        return TaskInfo(
            name=name,
            description=description,
            seq_len=side(cfg) ** 2,
            variable_length=False,
            input_kind="tokens" if tokens else "real",
            vocab_size=257 if tokens else None,
            input_dim=None if tokens else 1,
            num_classes=classes,
        )

    def decode(cfg: Any, arrays, split: str) -> Split:
        return Split(
            inputs=decode_pixels(arrays[f"{split}/inputs"], cfg.encoding, *normalise),
            labels=arrays[f"{split}/labels"],
            lengths=arrays[f"{split}/lengths"],
        )

    return TaskSpec(name=name, description=description, info=info, decode=decode, **fields)


DESCRIPTIONS = {
    "pathfinder": "Pathfinder 32x32 (procedural): are the two markers on one dashed contour? "
    "2 classes, pixel by pixel.",
    "pathx": "Path-X 128x128 (procedural Pathfinder): are the two markers on one dashed "
    "contour? 2 classes, pixel by pixel.",
}

LABELS = {"pathfinder": "Pathfinder", "pathx": "Path-X"}  # as the LRA paper names them


def _spec(name: str, config_cls: type, presets: dict) -> TaskSpec:
    return pixel_spec(name, DESCRIPTIONS[name], lambda cfg: cfg.image_size,
                      config_cls=config_cls, label=LABELS[name], make=make, presets=presets)


TASKS = {
    "pathfinder": _spec(
        "pathfinder",
        PathfinderConfig,
        {
            "smoke": dict(num_train=128, num_val=32, num_test=32, image_size=16,
                          contour_length=5, num_distractors=1, distractor_length=2),
            "cpu": dict(num_train=4000, num_val=500, num_test=500),
            "gpu": dict(num_train=160_000, num_val=20_000, num_test=20_000),
        },
    ),
    "pathx": _spec(
        "pathx",
        PathXConfig,
        {
            "smoke": dict(num_train=64, num_val=16, num_test=16, image_size=32,
                          contour_length=5, paddle_length=3, paddle_margin=2,
                          num_distractors=1, distractor_length=2, marker_radius=1),
            "cpu": dict(num_train=1000, num_val=200, num_test=200),
            "gpu": dict(num_train=160_000, num_val=20_000, num_test=20_000),
        },
    ),
}
