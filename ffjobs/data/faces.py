"""Synthetic cartoon faces whose identity is stable and learnable: the renderer.

Each identity fixes face geometry and colouring (face shape and size, skin tone, eye spacing,
size and colour, nose and mouth shape, hair style and colour, brow thickness). Each image
varies pose (offset, rotation, scale), expression (mouth open, smile, brow raise), lighting
(directional gradient, brightness) and background. Everything derives from the seed, so the
same arguments draw byte-identical images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

SUPERSAMPLE_UP_TO = 128
"""Faces up to this size are drawn at twice the size and reduced, which anti-aliases the
shapes; larger faces are drawn directly (their edges are smooth enough, and it is 4x cheaper)."""


@dataclass(frozen=True)
class Identity:
    """What stays the same across every image of one synthetic person."""

    face_width: float
    face_height: float
    skin: tuple[int, int, int]
    eye_spacing: float
    eye_size: float
    eye_colour: tuple[int, int, int]
    nose_length: float
    nose_width: float
    mouth_width: float
    lip_colour: tuple[int, int, int]
    hair_colour: tuple[int, int, int]
    hair_style: int
    brow_thickness: float

    @classmethod
    def sample(cls, rng: np.random.Generator) -> Identity:
        def colour(low: int, high: int) -> tuple[int, int, int]:
            return tuple(int(v) for v in rng.integers(low, high, 3))

        tone = rng.uniform(0.35, 1.0)
        skin = (int(120 + 125 * tone), int(80 + 110 * tone), int(50 + 100 * tone))
        return cls(
            face_width=rng.uniform(0.30, 0.42),
            face_height=rng.uniform(0.40, 0.52),
            skin=skin,
            eye_spacing=rng.uniform(0.12, 0.22),
            eye_size=rng.uniform(0.030, 0.055),
            eye_colour=colour(10, 200),
            nose_length=rng.uniform(0.08, 0.16),
            nose_width=rng.uniform(0.03, 0.07),
            mouth_width=rng.uniform(0.10, 0.22),
            lip_colour=(
                int(rng.integers(140, 230)),
                int(rng.integers(30, 100)),
                int(rng.integers(40, 110)),
            ),
            hair_colour=colour(0, 180),
            hair_style=int(rng.integers(0, 4)),
            brow_thickness=rng.uniform(0.010, 0.030),
        )


@dataclass(frozen=True)
class Variation:
    """What changes from one image of a person to the next."""

    dx: float
    dy: float
    angle: float
    scale: float
    mouth_open: float
    smile: float
    brow_raise: float
    light_angle: float
    light_strength: float
    brightness: float
    background: tuple[int, int, int]
    background2: tuple[int, int, int]

    @classmethod
    def sample(cls, rng: np.random.Generator) -> Variation:
        return cls(
            dx=rng.uniform(-0.07, 0.07),
            dy=rng.uniform(-0.06, 0.06),
            angle=rng.uniform(-18, 18),
            scale=rng.uniform(0.88, 1.12),
            mouth_open=rng.uniform(0.0, 1.0),
            smile=rng.uniform(-0.5, 1.0),
            brow_raise=rng.uniform(0.0, 1.0),
            light_angle=rng.uniform(0, 2 * math.pi),
            light_strength=rng.uniform(0.0, 0.45),
            brightness=rng.uniform(0.75, 1.2),
            background=tuple(int(v) for v in rng.integers(0, 256, 3)),
            background2=tuple(int(v) for v in rng.integers(0, 256, 3)),
        )


def _ellipse(
    draw: ImageDraw.ImageDraw, cx: float, cy: float, rx: float, ry: float, fill: tuple[int, ...]
) -> None:
    draw.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=fill)


def _draw_face(person: Identity, var: Variation, canvas: int) -> Image.Image:
    """The face alone on a transparent layer, upright and centred, with this expression."""
    layer = Image.new("RGBA", (canvas, canvas), (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    c, s = canvas / 2, canvas * var.scale
    fw, fh = person.face_width * s, person.face_height * s
    hair = (*person.hair_colour, 255)
    if person.hair_style in (1, 3):  # long hair behind the face
        _ellipse(draw, c, c + 0.05 * s, fw * 1.25, fh * 1.1, hair)
    _ellipse(draw, c - fw * 0.98, c, fw * 0.12, fh * 0.18, (*person.skin, 255))  # ears
    _ellipse(draw, c + fw * 0.98, c, fw * 0.12, fh * 0.18, (*person.skin, 255))
    _ellipse(draw, c, c, fw, fh, (*person.skin, 255))
    if person.hair_style != 2:  # 2 is bald
        top = c - fh * (1.08 if person.hair_style == 0 else 1.02)
        draw.chord((c - fw * 1.05, top, c + fw * 1.05, c - fh * 0.05), 180, 360, fill=hair)
    if person.hair_style == 3:  # bangs
        draw.rectangle((c - fw * 0.7, c - fh * 0.75, c + fw * 0.7, c - fh * 0.5), fill=hair)
    eye_y = c - fh * 0.12
    es, er = person.eye_spacing * s, person.eye_size * s
    brow_y = eye_y - er * (2.0 + 1.2 * var.brow_raise)
    for side in (-1, 1):
        ex = c + side * es
        _ellipse(draw, ex, eye_y, er * 1.6, er, (245, 245, 245, 255))
        _ellipse(draw, ex, eye_y, er * 0.8, er * 0.8, (*person.eye_colour, 255))
        _ellipse(draw, ex, eye_y, er * 0.35, er * 0.35, (10, 10, 10, 255))
        draw.line(
            (ex - er * 1.7, brow_y + side * er * 0.2, ex + er * 1.7, brow_y - side * er * 0.2),
            fill=hair,
            width=max(1, int(person.brow_thickness * s)),
        )
    nose_top, nose_bottom = eye_y + er, eye_y + er + person.nose_length * s
    nw = person.nose_width * s
    shade = tuple(int(v * 0.8) for v in person.skin)
    draw.polygon([(c, nose_top), (c - nw, nose_bottom), (c + nw, nose_bottom)], fill=(*shade, 255))
    mouth_y = nose_bottom + fh * 0.22
    mw = person.mouth_width * s
    curve = var.smile * fh * 0.08
    opening = var.mouth_open * fh * 0.10 + 1
    lips = (*person.lip_colour, 255)
    draw.polygon(
        [
            (c - mw, mouth_y - curve),
            (c, mouth_y + curve * 0.5 - opening * 0.3),
            (c + mw, mouth_y - curve),
            (c, mouth_y + curve * 0.5 + opening),
        ],
        fill=lips,
    )
    if var.mouth_open > 0.5:
        _ellipse(
            draw,
            c,
            mouth_y + curve * 0.3 + opening * 0.3,
            mw * 0.45,
            opening * 0.35,
            (60, 10, 20, 255),
        )
    return layer


def render_face(person: Identity, var: Variation, size: int) -> Image.Image:
    """One RGB image of ``person`` under variation ``var``, ``size`` x ``size`` pixels."""
    canvas = size * (2 if size <= SUPERSAMPLE_UP_TO else 1)
    ramp = np.linspace(0.0, 1.0, canvas, dtype=np.float32)[:, None, None]
    background = (
        np.array(var.background, np.float32) * (1 - ramp)
        + np.array(var.background2, np.float32) * ramp
    )
    image = Image.fromarray(np.broadcast_to(background, (canvas, canvas, 3)).astype(np.uint8))
    face = _draw_face(person, var, canvas).rotate(
        var.angle, resample=Image.Resampling.BILINEAR, translate=(var.dx * canvas, var.dy * canvas)
    )
    image.paste(face, (0, 0), face)
    image = image.resize((size, size), Image.Resampling.BOX)
    # Directional light and exposure, applied to the whole picture like a camera would see it.
    ys, xs = np.mgrid[-1 : 1 : complex(size), -1 : 1 : complex(size)].astype(np.float32)
    direction = xs * math.cos(var.light_angle) + ys * math.sin(var.light_angle)
    gain = var.brightness * (1 + var.light_strength * direction)[..., None]
    lit = np.asarray(image, dtype=np.float32) * gain
    return Image.fromarray(np.clip(lit, 0, 255).astype(np.uint8))


def identity_name(index: int) -> str:
    return f"id_{index:04d}"
