"""``DynamicConfig``: one frozen config drives ``make_dynamic()``, ``edgenlp dynamic`` and the recipe step.

>>> DynamicConfig(exits=None, rule="maxprob", max_drop=0.5)                     # doctest: +SKIP
>>> DynamicConfig(exits=(), tokens="ltp", max_drop=1.0, max_seq_len=256)        # doctest: +SKIP
>>> DynamicConfig(exits=(2, 4), rule="patience", threshold=2, tokens="keep", keep_ratio=0.7)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from edgenlp.config import Config, knob
from edgenlp.dynamic.rules import RULES, TOKEN_MODES, check_keep_ratio, check_threshold
from edgenlp.recipe import register_step

# What an exit head reads (edgenlp.dynamic.model.ExitHead; here so that reading a recipe imports no torch).
POOLINGS = ("cls", "mean")


@dataclass(frozen=True)
class DynamicConfig(Config):
    """Early exits and token pruning for a fine-tuned model.

    ``exits`` are layer numbers (1 = after the first layer) that get an exit
    head; ``None`` means every layer, ``()`` none. The last layer's exit is
    always the model's own classifier. Heads are distilled from the final
    classifier (temperature ``temperature``, plus ``label_weight`` x the
    label loss) with the backbone frozen, so with exits switched off the model
    is exactly the static model; ``joint`` also trains the backbone (with
    every exit's loss and distillation from the unchanged model), through the
    hard token pruning when ``tokens`` prunes, so the layers learn to work on
    the tokens they keep (IMDB at 128 tokens: ``tools/bench/results/dynamic.md``,
    case imdb128-ltp-exits-joint against imdb128-ltp-exits-m1-3k). With
    token pruning and no exits, ``joint`` is LTP's last stage: the backbone
    fine-tuned through the hardened pruning, distilled from the unpruned
    model. ``joint_token_drop`` trains it at more pruning than the budget
    allows on the frozen model (the scale that costs that many points), then
    calibrates the scale again on the trained model, to the budget.

    ``tokens``: ``none``; ``ltp`` learns one importance threshold per layer
    with a soft mask (temperature ``token_temperature``, sparsity weight
    ``token_lambda``, ``token_epochs``) distilled from the unpruned model,
    then hardens it; ``keep`` keeps ``keep_ratio`` of the tokens after every
    layer. See :mod:`edgenlp.dynamic.rules` for the exact decisions.

    ``threshold`` fixes the exit threshold (maxprob/entropy in [0, 1],
    patience an integer number of agreeing exits); ``None`` calibrates it, and
    the scale of the learned token thresholds, on ``val_rows`` training rows
    held out from everything else (rows the fine-tuning did not use when its
    recipe says which it used), to the lowest expected cost whose accuracy
    there is at most ``max_drop`` points below the static model's. Dev is never
    used. ``val_min_words`` draws those rows only from training rows of at
    least that many words, for tasks whose training rows are shorter than what
    the model will see (SST-2 trains on phrases and is used on sentences: a
    threshold calibrated on phrases, which the early exits find easy, costs
    more on sentences). ``train_limit`` caps the training rows the heads and
    thresholds learn from.

    How many validation rows: a threshold's drop is measured to about
    ``100 * sqrt(changed / n)`` points (one standard error, ``changed`` the
    share of rows whose correctness the exits change), recorded as
    ``drop_se`` beside the chosen point and warned about when it exceeds
    ``max_drop``. The drop rises slowly as the threshold falls, so that noise
    moves the chosen threshold far: on SST-2 at 0.5 points, thresholds chosen
    on 1,000 rows cost anywhere from about 0.4x to 0.7x the static FLOPs and
    up to three times the drop allowed, on 4,000 rows far less
    (``tools/bench/results/dynamic-val-rows.md``). Hold out thousands of rows
    where the task has them.

    ``exit_pooling``: an exit head reads the mean of the tokens its layer
    processed (``mean``, the default), or the ``[CLS]`` token as the model's
    own classifier does (``cls``). The first layers have barely mixed the
    sentence into ``[CLS]``, so ``[CLS]`` heads there are rarely confident;
    ``tools/bench/dynamic.py`` measures both (its ``sst2-long-val`` and
    ``sst2-mean`` cases).

    ``margin_se``: a setting fits when its validation drop plus ``margin_se``
    standard errors of that drop (paired per row against the static model) is
    within ``max_drop``. The cheapest of ~60 thresholds whose measured drop
    fits is, more often than not, one whose drop was measured low: with no
    margin the chosen points dropped 0.92 points on SST-2 dev against 0.44
    on validation, and 3.1 on IMDB dev against 0.5 +- 0.9. One standard error
    is fixed here, before any dev number, not tuned;
    ``tools/bench/calibration_margin.py`` measures what it does on training
    rows the calibration did not see. With few validation rows the margin
    keeps the thresholds near the static model: hold out more rows rather
    than lower it.

    Version 2 added ``val_min_words`` and ``exit_pooling``; a version-1 step
    reads back as ``val_min_words=0`` (any row) and ``exit_pooling="cls"``
    (what it trained). Version 3 added ``margin_se``; an earlier step reads
    back as ``margin_se=0`` (the measured drop alone, what it calibrated to).
    """

    VERSION = 3

    exits: tuple[int, ...] | None = knob(None, help="Layers with an exit head (1 = after the first layer); None: every "
                                         "layer, (): none. The last layer's exit is the model's own classifier.")
    exit_pooling: str = knob("mean", choices=POOLINGS, help="What an exit head reads: the mean of the tokens its layer "
                             "processed, or the [CLS] token (as the model's own classifier).")
    rule: str = knob("maxprob", choices=RULES, help="Exit when the max probability reaches the threshold (maxprob), the "
                     "normalized entropy falls to it (entropy), or that many exits in a row agree (patience).")
    threshold: float | None = knob(None, help="Fix the exit threshold instead of calibrating it (maxprob/entropy in "
                                   "[0, 1], patience an integer from 1 to the number of exits).")
    tokens: str = knob("none", choices=TOKEN_MODES, help="Token pruning: learned per-layer thresholds (ltp), a keep "
                       "ratio per layer (keep) or none.")
    keep_ratio: float = knob(1.0, help="Tokens kept after each token layer with tokens='keep', in (0, 1].")
    max_drop: float = knob(0.5, help="Max validation accuracy drop, in points, the calibrated thresholds may cost.")
    margin_se: float = knob(1.0, help="Standard errors of the validation drop added to it before it is held to "
                            "max_drop (drop + margin_se x SE <= max_drop); 0: the measured drop alone.")
    val_rows: int = knob(2000, help="Training rows held out for calibration (never dev); more rows measure a "
                         "threshold's drop more precisely (the report's drop_se).")
    val_min_words: int = knob(0, help="Hold out only training rows of at least this many words (when inputs are "
                              "longer than most training rows, e.g. SST-2's phrases); 0: any row.")
    train_limit: int | None = knob(8000, help="Training rows the exit heads and token thresholds learn from.")
    epochs: float = knob(4.0, help="Exit-head training epochs.")
    lr: float = knob(1e-3, help="Exit-head learning rate.")
    joint: bool = knob(False, help="Also train the backbone, through the hard token pruning where tokens are "
                                           "pruned (the static model then changes).")
    backbone_lr: float = knob(2e-5, help="Backbone learning rate with --joint.")
    joint_token_drop: float | None = knob(None, help="With --joint and --tokens ltp: train the backbone at the token "
                                          "scale that costs this many points on validation before the training "
                                          "(more pruning than the budget allows), then calibrate the scale again on "
                                          "the trained model, to the budget. Default: train at the budget's scale.")
    temperature: float = knob(2.0, help="Distillation temperature of the exits.")
    label_weight: float = knob(0.0, help="Weight of the label loss beside distillation.")
    token_epochs: float = knob(1.0, help="ltp: soft-mask threshold learning epochs.")
    token_lr: float = knob(0.02, help="ltp: learning rate of the thresholds.")
    token_temperature: float = knob(0.1, help="ltp: temperature of the soft mask.")
    token_lambda: float = knob(0.2, help="ltp: weight of the kept-token fraction in the loss (higher drops more).")
    batch_size: int = knob(32, help="Training and calibration batch size.")
    max_seq_len: int = knob(128, help="Token limit while training and calibrating (capped at the model's positions when not given).")
    seed: int = knob(0, help="Seed of the validation split, data order and head initialization.")
    threads: int | None = knob(None, help="torch intra-op threads (default: torch's choice).")

    @classmethod
    def upgrade(cls, d: dict) -> dict:
        if d.get("version", cls.VERSION) < 2:
            d = {"exit_pooling": "cls", **d, "version": 2}  # version-1 heads read [CLS]
        if d.get("version", cls.VERSION) < 3:
            d = {"margin_se": 0.0, **d, "version": 3}  # calibrated to the measured drop alone
        return d

    def __post_init__(self) -> None:
        if self.exits is not None:
            exits = tuple(self.exits)
            if any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in exits):
                raise ValueError(f"exits must be layer numbers >= 1 (1 = after the first layer), got {list(exits)}")
            object.__setattr__(self, "exits", tuple(sorted(set(exits))))
        if self.exit_pooling not in POOLINGS:
            raise ValueError(f"exit_pooling must be one of {', '.join(POOLINGS)}, got {self.exit_pooling!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if self.threshold is not None:
            object.__setattr__(self, "threshold", check_threshold(self.rule, self.threshold))
        if self.tokens not in TOKEN_MODES:
            raise ValueError(f"tokens must be one of {', '.join(TOKEN_MODES)}, got {self.tokens!r}")
        check_keep_ratio(self.keep_ratio, name="keep_ratio")
        if self.tokens != "keep" and self.keep_ratio != 1.0:
            raise ValueError(f"keep_ratio {self.keep_ratio} needs tokens='keep', got tokens={self.tokens!r}")
        if self.exits == () and self.tokens == "none":
            raise ValueError("nothing to do: no exits and no token pruning (give exits or tokens)")
        if not isinstance(self.max_drop, (int, float)) or not 0.0 <= self.max_drop <= 100.0:
            raise ValueError(f"max_drop must be in [0, 100] accuracy points, got {self.max_drop!r}")
        if isinstance(self.margin_se, bool) or not isinstance(self.margin_se, (int, float)) or not 0.0 <= self.margin_se <= 10.0:
            raise ValueError(f"margin_se must be in [0, 10] standard errors, got {self.margin_se!r}")
        for name in ("val_rows", "batch_size", "max_seq_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (2 if name == "max_seq_len" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.val_min_words, bool) or not isinstance(self.val_min_words, int) or self.val_min_words < 0:
            raise ValueError(f"val_min_words must be an integer >= 0, got {self.val_min_words!r}")
        if self.train_limit is not None and (not isinstance(self.train_limit, int) or self.train_limit < 1):
            raise ValueError(f"train_limit must be >= 1 or None, got {self.train_limit!r}")
        for name in ("epochs", "token_epochs", "label_weight", "token_lambda"):
            if not isinstance(getattr(self, name), (int, float)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("lr", "backbone_lr", "temperature", "token_lr", "token_temperature"):
            if not isinstance(getattr(self, name), (int, float)) or not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not isinstance(self.joint, bool):
            raise ValueError(f"joint must be True or False, got {self.joint!r}")
        if self.joint_token_drop is not None:
            v = self.joint_token_drop
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v <= 100.0:
                raise ValueError(f"joint_token_drop must be in (0, 100] accuracy points, got {v!r}")
            if not (self.joint and self.tokens == "ltp"):
                raise ValueError("joint_token_drop trains the backbone at a token scale: it needs joint=True and "
                                 f"tokens='ltp', got joint={self.joint}, tokens={self.tokens!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be >= 1, got {self.threads!r}")

    def exit_layers(self, num_layers: int) -> tuple[int, ...]:
        """The exit layers for a model of ``num_layers`` layers (the last always included).

        Raises ValueError for an exit on a layer the model does not have.
        """
        if self.exits is None:
            return tuple(range(1, num_layers + 1))
        bad = [e for e in self.exits if e > num_layers]
        if bad:
            raise ValueError(f"exit on layer {bad[0]}, but the model has {num_layers} layers (exits are 1..{num_layers})")
        return tuple(sorted(set(self.exits) | {num_layers}))


register_step("dynamic", DynamicConfig)
