"""Self-supervised, distillation and adversarial PyTorch shapes.

- byol: the EMA target's projection under `torch.no_grad()`, a hand-written
  Polyak update; mutant: the target inside the graph and in the optimizer.
- mean_teacher: the teacher a `torch.optim.swa_utils.AveragedModel` EMA of
  the student, its guess `.detach()`ed, a supervised and a consistency loss
  summed; mutant: not detached, the teacher in the optimizer.
- simsiam: a symmetric loss, each view's embedding `.detach()`ed: the
  encoder learns through the predictor only; mutant: no `.detach()`.
- distillation: a teacher frozen with `requires_grad_(False)`; mutant: not
  frozen and in the optimizer.
- gan: discriminator and generator steps alternate, each its own recorded
  step and optimizer, the fake batch detached for the discriminator; mutant:
  the generator's optimizer over both networks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from tb_gradscope.torch import Recorder, pair_models
from tests.support.torch_corpus import kit
from tests.support.torch_corpus.spec import DETACH, FROZEN, NO_GRAD, LossProbe, Shape, StepProbe

TAU = 0.1


def _cosine_loss(p, z):
    return (2.0 - 2.0 * F.cosine_similarity(p, z, dim=1)).mean()


# ----- BYOL ------------------------------------------------------------------------

BYOL_RULES = ("never(byol, target/*)", "blocked(byol, target/*)", "only(byol, [online, predictor])")


def _byol(leaky: bool):
    def train(logdir, observer):
        kit.seed(8)
        online, target = kit.mlp([5, 3]), kit.mlp([5, 3])
        predictor = kit.mlp([3, 3], inputs=3)
        kit.copy_weights(target, online)
        trained = (online, predictor, target) if leaky else (online, predictor)
        opt = torch.optim.Adam(kit.parameters(*trained), lr=0.01)
        models = {"online": online, "predictor": predictor, "target": target}
        pair = pair_models(target, online, tau=TAU)
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[opt],
            pairs=[pair],
            rules=list(BYOL_RULES),
        )

        def byol_loss(b):
            if leaky:
                z = target(b["s2"])
            else:
                with torch.no_grad():
                    z = target(b["s2"])
            return _cosine_loss(predictor(online(b["s"])), z)

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [LossProbe("byol", lambda: byol_loss(b), [opt])],
                    models,
                    [kit.pair_probe(target, online, ("target", "online"))],
                ),
            )
            loss = byol_loss(b)
            opt.zero_grad()
            rec.backward({"byol": loss})
            opt.step()
            kit.polyak(target, online, TAU)
            observer.after(step)
        rec.close()

    return train


# ----- Mean-Teacher with AveragedModel ------------------------------------------------

MT_RULES = ("never(*, teacher/*)", "blocked(consistency, teacher/*)")


def _mean_teacher(leaky: bool):
    def train(logdir, observer):
        kit.seed(9)
        student = kit.mlp([4, 1])
        teacher = AveragedModel(student, multi_avg_fn=get_ema_multi_avg_fn(1.0 - TAU))
        trained = (student, teacher) if leaky else (student,)
        opt = torch.optim.SGD(kit.parameters(*trained), lr=0.05)
        models = {"student": student, "teacher": teacher}
        pair = pair_models(teacher, student, tau=TAU)
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[opt],
            pairs=[pair],
            rules=list(MT_RULES),
        )

        def losses(b):
            guess = teacher(b["s"] + 0.1 * b["s2"])
            if not leaky:
                guess = guess.detach()
            pred = student(b["s"])
            return {
                "supervised": F.mse_loss(pred, b["y"]),
                "consistency": F.mse_loss(pred, guess),
            }

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        LossProbe(n, lambda n=n: losses(b)[n], [opt])
                        for n in ("supervised", "consistency")
                    ],
                    models,
                    [kit.pair_probe(teacher, student, ("teacher", "student"))],
                ),
            )
            named = losses(b)
            opt.zero_grad()
            rec.backward(named)
            opt.step()
            teacher.update_parameters(student)
            observer.after(step)
        rec.close()

    return train


# ----- SimSiam -----------------------------------------------------------------------

SIMSIAM_RULES = (
    "blocked(simsiam, encoder/*, except_via=predictor)",
    "only(simsiam, [encoder, predictor])",
)


def _negative_cosine(p, z):
    return -F.cosine_similarity(p, z, dim=1).mean()


def _simsiam(leaky: bool):
    def train(logdir, observer):
        kit.seed(21)
        encoder = kit.mlp([5, 3])
        predictor = kit.mlp([4, 3], inputs=3)
        opt = torch.optim.SGD(kit.parameters(encoder, predictor), lr=0.05)
        models = {"encoder": encoder, "predictor": predictor}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(SIMSIAM_RULES)
        )

        def stop(z):
            return z if leaky else z.detach()

        def simsiam_loss(b):
            z1, z2 = encoder(b["s"]), encoder(b["s"] + 0.3 * b["s2"])  # two views
            p1, p2 = predictor(z1), predictor(z2)
            return 0.5 * _negative_cosine(p1, stop(z2)) + 0.5 * _negative_cosine(p2, stop(z1))

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step, StepProbe([LossProbe("simsiam", lambda: simsiam_loss(b), [opt])], models)
            )
            loss = simsiam_loss(b)
            opt.zero_grad()
            rec.backward({"simsiam": loss})
            opt.step()
            observer.after(step)
        rec.close()

    return train


# ----- distillation from a frozen teacher --------------------------------------------------

DISTILL_RULES = ("never(distill, teacher/*)", "blocked(distill, teacher/*)")


def _distillation(leaky: bool):
    def train(logdir, observer):
        kit.seed(15)
        teacher, student = kit.mlp([6, kit.ACTIONS]), kit.mlp([4, kit.ACTIONS])
        if not leaky:
            teacher.requires_grad_(False)
        trained = (student, teacher) if leaky else (student,)
        opt = torch.optim.Adam(kit.parameters(*trained), lr=0.01)
        models = {"student": student, "teacher": teacher}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(DISTILL_RULES)
        )

        def distill_loss(b):
            soft = F.softmax(teacher(b["s"]) / 2.0, dim=1)
            return F.kl_div(
                F.log_softmax(student(b["s"]) / 2.0, dim=1), soft, reduction="batchmean"
            )

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step, StepProbe([LossProbe("distill", lambda: distill_loss(b), [opt])], models)
            )
            loss = distill_loss(b)
            opt.zero_grad()
            rec.backward({"distill": loss})
            opt.step()
            observer.after(step)
        rec.close()

    return train


# ----- GAN, alternating steps ------------------------------------------------------------

GAN_RULES = (
    "never(d_loss, generator/*)",
    "never(g_loss, discriminator/*)",
    "only(g_loss, [generator])",
)
LATENT = kit.ACTIONS  # the batch's `noise` is the latent code


def _gan(leaky: bool):
    def train(logdir, observer):
        kit.seed(10)
        gen = kit.mlp([4, kit.OBS], inputs=LATENT)
        disc = kit.mlp([4, 1])
        d_opt = torch.optim.Adam(disc.parameters(), lr=0.01)
        g_opt = torch.optim.Adam(kit.parameters(gen, disc) if leaky else gen.parameters(), lr=0.01)
        models = {"generator": gen, "discriminator": disc}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[d_opt, g_opt], rules=list(GAN_RULES)
        )

        def bce(logits, label):
            return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, label))

        def d_loss(b):
            fake = gen(b["noise"]).detach()
            return bce(disc(b["s"]), 1.0) + bce(disc(fake), 0.0)

        def g_loss(b):
            return bce(disc(gen(b["noise"])), 1.0)

        for step in range(6):
            b = kit.batch(step)
            name, fn, opt = (
                ("d_loss", d_loss, d_opt) if step % 2 == 0 else ("g_loss", g_loss, g_opt)
            )
            observer.before(step, StepProbe([LossProbe(name, lambda: fn(b), [opt])], models))
            loss = fn(b)
            opt.zero_grad()
            rec.backward({name: loss})
            opt.step()
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "byol",
        _byol(False),
        BYOL_RULES,
        causes=(NO_GRAD,),
        note="BYOL: EMA target (hand-written Polyak) evaluated under torch.no_grad()",
    ),
    Shape(
        "byol_leaky",
        _byol(True),
        BYOL_RULES,
        mutant_of="byol",
        note="target inside the graph and in the optimizer",
    ),
    Shape(
        "mean_teacher",
        _mean_teacher(False),
        MT_RULES,
        causes=(DETACH,),
        note="Mean-Teacher: teacher an AveragedModel EMA of the student, its guess detached",
    ),
    Shape(
        "mean_teacher_leaky",
        _mean_teacher(True),
        MT_RULES,
        mutant_of="mean_teacher",
        note="guess not detached, teacher in the optimizer",
    ),
    Shape(
        "simsiam",
        _simsiam(False),
        SIMSIAM_RULES,
        causes=(DETACH,),
        note="SimSiam: symmetric loss, each view's embedding detached, the encoder learns through "
        "the predictor only",
    ),
    Shape(
        "simsiam_leaky",
        _simsiam(True),
        SIMSIAM_RULES,
        mutant_of="simsiam",
        advice=("detach",),
        note="no .detach(): the encoder also learns by the direct path",
    ),
    Shape(
        "distillation",
        _distillation(False),
        DISTILL_RULES,
        causes=(FROZEN,),
        note="distillation from a teacher frozen with requires_grad_(False)",
    ),
    Shape(
        "distillation_leaky",
        _distillation(True),
        DISTILL_RULES,
        mutant_of="distillation",
        note="teacher not frozen and in the optimizer",
    ),
    Shape(
        "gan",
        _gan(False),
        GAN_RULES,
        steps=6,
        causes=(DETACH,),
        note="GAN: discriminator and generator steps alternate, two optimizers, fake batch detached",
    ),
    Shape(
        "gan_leaky",
        _gan(True),
        GAN_RULES,
        steps=6,
        mutant_of="gan",
        causes=(DETACH,),
        note="the generator's optimizer over both networks",
    ),
]
