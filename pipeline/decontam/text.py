"""Text leaks: which left ("train") records copy the text of a right ("eval") record.

The same function serves eval against eval (one item in two benchmarks): "train" and "eval" only
name the two sides; coverage is always measured on the right text. No dataset is named here.

Method

1. Normalise (`normalise`, polars expressions over the whole column): Unicode NFKC (full-width
   letters and digits become ASCII), lower case, wrapper text removed (InternVL's `### Question:`
   frame with anything before it and its `### Solution Process:` tail, `<image>` tokens,
   MathVista's `Hint: ...` lead up to its `Question:` label, `Question:` / `Choices:` /
   `Options:` labels), apostrophes dropped (curly or straight, so "option's" is "options"),
   thousands separators dropped ("12,500" is "12500"; a decimal point stays a word break), every
   other run of characters that are not letters, digits or marks becomes one space (so quotes,
   punctuation and line wraps vanish, and `A:`, `A.`, `(A)`, `A)` all become the word `a`, exactly
   as the article in "A triangle" stays `a`), then stock instructions (`BOILERPLATE`) are cut out
   of the word sequence.
2. Words and n-grams: a normalised text is its words split on single spaces. Words are hashed to
   uint64; the hash of the n-gram starting at word i is  sum_k hash(word_{i+k}) * C_k  (wrapping
   uint64 arithmetic, C_k fixed odd constants), computed with column shifts over all the words of
   a batch; an n-gram is kept only when its last word belongs to the same text as its first, so
   no n-gram spans two texts.
3. Stock text is not a leak: an n-gram found in at least `stock_records` distinct records (left
   and right counted together) is ignored, and so is a whole text found that often ("Describe this
   image in detail."). Only n-grams that occur on the right can match, so only those are counted
   on the left.
4. Pairs: a left and a right text are candidates when they share non-stock n-grams. For each pair,
   the right text's matched n-gram starts j give the covered words (union of [j, j + n));
   `text_overlap` = covered words / right words, and the longest run of consecutive matched starts
   gives `longest_span` (run + n - 1 words) and `matched_text`. Equal normalised texts are a
   whole-text match (`exact`, overlap 1.0) unless the whole text is stock; texts shorter than n
   words can match only that way.
5. Kept: overlap >= `min_overlap`, and per left record only the right records within
   `sibling_margin` of its best overlap. Numbers and choice letters are words, so a template
   sibling (the same problem with other numbers or labels) covers less of the right text than the
   real source does, and is dropped when the source is there.

All of it is set-wise (polars frames, joins, group-bys). Identical normalised texts are processed
once (a record is its text's hash) and fanned out to their records at the end. The left side is
cut into batches of `BATCH_TEXTS` texts; the stock counts need the whole left side, so the
n-grams of a batch are first reduced to those found on the right (small), counted, and only then
joined into pairs. The pair join is bounded by the stock rule: an n-gram that is not stock sits in
fewer than `stock_records` records, so it yields fewer than stock_records^2 / 4 pairs.

Settings: `TextMatchSettings`; the defaults were chosen on the tuning half of
tests/benchmarks/bench_text_leaks.py (the figures are at the class). Measured there: 400,000
train texts against 10,000 eval texts in about 4 s and under 1 GB on 2 cores.

Limits worth knowing:
- Stock is counted in records, so a real question repeated in `stock_records` or more records
  (many rollouts of one prompt) is taken for stock and missed; deduplicate upstream or raise it.
- Coverage keeps stock words in the denominator: a partial copy of a heavily templated eval text
  covers less of it than the same copy of a one-off text.
- Changed words cannot be told from typos: a copy with a typo in a short text is missed, and a
  sibling that differs in one word of a long text (above ~10 words per 1 - min_overlap) is kept.
- Whatever the normaliser does not undo (another instruction sentence, "5cm" against "5 cm") is
  left to the n-grams; symbols such as + and = are dropped, so expressions that differ only in
  them look alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from pipeline.settings import TEXT_MATCH_DEFAULTS, Settings  # the defaults, with the release id's view of them

RECORD_TEXT_SCHEMA = pa.schema([("dataset", pa.string()), ("key", pa.string()), ("text", pa.string())])

TEXT_LEAK_SCHEMA = pa.schema([
    ("train_dataset", pa.string()), ("train_key", pa.string()),
    ("eval_dataset", pa.string()), ("eval_key", pa.string()),
    ("text_overlap", pa.float32()),  # share of the eval text's normalised words covered by matched non-stock n-grams
    ("longest_span", pa.int32()),  # words in the longest run of the eval text matched contiguously
    ("matched_text", pa.string()),  # that run: the eval text's normalised words joined by spaces
    ("exact", pa.bool_()),  # the two normalised texts are equal
])


@dataclass(frozen=True)
class TextMatchSettings:
    """How texts are matched. The defaults were chosen on the tuning half of
    tests/benchmarks/bench_text_leaks.py. The rule: highest recall at precision >= 0.99 with no
    generic prompt reported, then the centre of the settings tied with it (ngram 10-12,
    stock_records 20-30, min_overlap 0.85-0.9; the margin changed nothing there). Tuning half:
    precision 0.993, recall 0.889 (1.000 for the perturbations the normaliser undoes, 0.39 for an
    extra sentence or a typo). Held-back half: precision 0.994, recall 0.895 (1.000 and 0.43)."""

    # Word n-gram size. Long n-grams keep template siblings apart: every n-gram that touches a
    # changed number or label is lost. The price: a text with a typo or an extra word in a
    # short question (< 2n words) falls below min_overlap, and texts under n words match only whole.
    ngram: int = TEXT_MATCH_DEFAULTS["ngram"]
    # A sibling that differs in a single slot word near the end of the text still covers
    # (words - 1) / words of it; a lower threshold finds typo copies but reports those siblings.
    min_overlap: float = TEXT_MATCH_DEFAULTS["min_overlap"]
    # Above the repeats of one real question (rollouts: up to 2 x 8 train records plus the eval
    # record in the bench), below the record count of generic prompts (30 and up in the bench, far
    # more in real training sets).
    stock_records: int = TEXT_MATCH_DEFAULTS["stock_records"]
    # Keep only right records nearly as well covered as the best: a sibling that differs in one
    # choice (36 of 37 words, 0.973) goes when the real source (1.0) is there.
    sibling_margin: float = TEXT_MATCH_DEFAULTS["sibling_margin"]

    @classmethod
    def from_settings(cls, settings: Settings) -> TextMatchSettings:
        """A run's text matching: its `text_*` settings, the defaults where they are unset."""
        given = {"ngram": settings.text_ngram, "min_overlap": settings.text_min_overlap,
                 "stock_records": settings.text_stock_records, "sibling_margin": settings.text_sibling_margin}
        return cls(**{k: v for k, v in given.items() if v is not None})


# Texts per batch: bounds the converted input and the exploded word frame (~65 words a text).
BATCH_TEXTS = 50_000

# Wrapper text, removed before punctuation goes (the labels need their colons). Applied to the
# NFKC, lower-cased text in two passes, because the second pass's line anchors must see the text
# after the frame is gone.
_FRAME = "|".join([
    r"(?s:^.*?###\s*question\s*:)",  # InternVL: "### Question:" and whatever precedes it (system prompt)
    r"(?s:###\s*solution\s+process\s*:.*$)",  # InternVL: the solution tail
    r"<\s*(?:image|img)[\s_]*\d*\s*>",  # <image>, <image 1>, <image_2>
])
_LABELS = "|".join([
    r"(?m:^)[ \t]*hint\s*:(?s:.{0,400}?)\bquestion\s*:",  # MathVista: "Hint: ..." up to its "Question:"
    r"(?m:^)[ \t]*(?:question|q)\s*:",  # a "Question:" label at a line start
    r"\b(?:choices|options)\s*:",  # the label before the choices
])
_THOUSANDS = r"([0-9]),([0-9]{3})\b"
_APOSTROPHES = ["'", "\u2018", "\u2019", "\u201a", "\u201b", "\u2032", "\u00b4", "`"]

# Stock instructions, as word sequences of the normalised text ("e.g.," is "e g", "option's" is
# "options", "\boxed{}" is "boxed"). Cut wherever they occur.
BOILERPLATE = [
    r"answer the question using a single (?:word|number) or (?:a )?(?:short )?phrase",
    r"answer (?:the question )?with a (?:single word|short phrase|word or phrase)",
    r"please answer the question and provide the correct option letter e g a b c d at the end",
    # MathVista's other hints: "... requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end."
    r"please answer the question requiring [\w ]{1,80}? and provide the final (?:value|list) e g [\w ]{1,80}? "
    r"at the end",
    r"answer with the options? letter from the given choices directly",
    r"first perform reasoning then finally select the question from the choices in the following format answer xxx",
    r"please select the correct answer from the options above",
    r"please reason step by step and put your final answer within boxed",
]


def _normalised(text: pl.Expr) -> pl.Expr:
    t = text.str.normalize("NFKC").str.to_lowercase()
    t = t.str.replace_all(_FRAME, " ").str.replace_all(_LABELS, " ")
    t = t.str.replace_many(_APOSTROPHES, [""] * len(_APOSTROPHES))
    # Thousands separators: "12,500" is "12500" (twice: "1,234,567" needs a second pass).
    t = t.str.replace_all(_THOUSANDS, "$1$2").str.replace_all(_THOUSANDS, "$1$2")
    # Punctuation, symbols, tabs and line breaks; a class without the plain space is 4x faster
    # than one with it (single spaces are most of the text), so runs of spaces are collapsed next.
    t = t.str.replace_all(r"[^\p{L}\p{N}\p{M} ]+", " ").str.replace_all(" {2,}", " ")
    t = t.str.replace_all(r"\b(?:" + "|".join(BOILERPLATE) + r")\b", " ")
    return t.str.replace_all(" {2,}", " ").str.strip_chars(" ")


def normalise(texts) -> pl.Series:
    """The normalised texts (see the module docstring); None stays None."""
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        series = pl.Series("text", texts)
    elif isinstance(texts, pl.Series):
        series = texts.rename("text")
    else:
        series = pl.Series("text", list(texts), dtype=pl.String)
    return series.cast(pl.String).to_frame().select(_normalised(pl.col("text"))).to_series()


_SEED = 0x5EED
MAX_NGRAM = 64


def _splitmix64(count: int, state: int = 0x5EED) -> list[int]:
    """Fixed odd 64-bit constants, one per word position of an n-gram."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        out.append((z ^ (z >> 31)) | 1)
    return out


_MULTIPLIERS = _splitmix64(MAX_NGRAM)


def _records(table: pa.Table) -> pl.DataFrame:
    """dataset, key, norm, thash (the normalised text's hash), nwords; texts with no words dropped.
    A batch of rows at a time, so only a batch of the input is ever converted; the streaming
    engine runs a batch's regex passes on all cores."""
    parts = []
    for start in range(0, table.num_rows, BATCH_TEXTS):
        part = pl.from_arrow(table.slice(start, BATCH_TEXTS).select(["dataset", "key", "text"]))
        parts.append(
            part.lazy()
            .select(pl.col("dataset", "key").cast(pl.String), norm=_normalised(pl.col("text").cast(pl.String)))
            .filter(pl.col("norm").is_not_null() & (pl.col("norm") != ""))
            .with_columns(thash=pl.col("norm").hash(_SEED),
                          nwords=(pl.col("norm").str.count_matches(" ", literal=True) + 1).cast(pl.UInt32))
            .collect(engine="streaming"))
        del part
    if not parts:
        return pl.DataFrame(schema={"dataset": pl.String, "key": pl.String, "norm": pl.String,
                                    "thash": pl.UInt64, "nwords": pl.UInt32})
    return pl.concat(parts, rechunk=False)


def _distinct_texts(records: pl.DataFrame) -> pl.DataFrame:
    """thash, norm, nwords, mult (records with that text)."""
    return records.group_by("thash").agg(pl.col("norm", "nwords").first(), mult=pl.len().cast(pl.UInt32))


def _ngrams(texts: pl.DataFrame, n: int, positions: bool) -> pl.DataFrame:
    """thash, g (the n-gram's hash) and, with positions, j (its first word) of every n-gram of the
    texts (thash, norm, nwords; each thash once, every text at least n words)."""
    cols = [pl.col("thash"), pl.col("norm").str.split(" ").alias("word")]
    if positions:
        cols.append(pl.int_ranges(0, pl.col("nwords"), dtype=pl.UInt32).alias("j"))
    words = texts.select(cols).explode(["word", "j"] if positions else ["word"])
    # Hash the words once and let the strings go before the n shifted copies are made.
    words = words.with_columns(pl.col("word").hash(_SEED)).rename({"word": "h"})
    h = pl.col("h")
    g = h * pl.lit(_MULTIPLIERS[0], pl.UInt64)
    for k in range(1, n):
        g = g + h.shift(-k) * pl.lit(_MULTIPLIERS[k], pl.UInt64)
    # Texts are contiguous and distinct, so the n-gram stays inside its text iff its last word's
    # text is its first word's.
    inside = pl.col("thash").shift(-(n - 1)) == pl.col("thash")
    return words.select(pl.col("thash"), *([pl.col("j")] if positions else []), g.alias("g"), inside.alias("inside")) \
        .filter(pl.col("inside")).drop("inside")


def _coverage(matches: pl.DataFrame, n: int) -> pl.DataFrame:
    """Per (lhash, rhash): covered right words, and the longest run of consecutive matched starts
    (start, span in words). `matches`: lhash, rhash, j, unique."""
    m = matches.with_columns(pl.col("j").cast(pl.Int64)).sort("lhash", "rhash", "j")
    same_next = (pl.col("lhash").shift(-1) == pl.col("lhash")) & (pl.col("rhash").shift(-1) == pl.col("rhash"))
    same_prev = (pl.col("lhash").shift(1) == pl.col("lhash")) & (pl.col("rhash").shift(1) == pl.col("rhash"))
    gap = pl.when(same_next).then(pl.col("j").shift(-1) - pl.col("j")).otherwise(n)
    run_start = ~(same_prev & (pl.col("j").shift(1) == pl.col("j") - 1)).fill_null(False)
    m = m.with_columns(cover=pl.min_horizontal(gap, pl.lit(n, pl.Int64)), run=run_start.cum_sum())
    cover = m.group_by("lhash", "rhash").agg(pl.col("cover").sum())
    runs = m.group_by("run").agg(pl.col("lhash", "rhash", "j").first(), length=pl.len())
    longest = pl.col("length") == pl.col("length").max()
    best_run = runs.group_by("lhash", "rhash").agg(  # the longest run; the first of equally long ones
        start=pl.col("j").filter(longest).min(), span=pl.col("length").max() + (n - 1))
    return cover.join(best_run, on=["lhash", "rhash"])


def _empty() -> pa.Table:
    return TEXT_LEAK_SCHEMA.empty_table()


def text_leaks(train: pa.Table, evals: pa.Table, settings: TextMatchSettings = TextMatchSettings()) -> pa.Table:
    """Train records that copy eval records' text, in TEXT_LEAK_SCHEMA, sorted by train_dataset,
    train_key, eval_dataset, eval_key. Both inputs are in RECORD_TEXT_SCHEMA."""
    n = settings.ngram
    if not 1 <= n <= MAX_NGRAM:
        raise ValueError(f"ngram must be 1..{MAX_NGRAM}, got {n}")
    if train.num_rows == 0 or evals.num_rows == 0:
        return _empty()
    right = _records(evals)
    left = _records(train)
    if right.is_empty() or left.is_empty():
        return _empty()
    r_texts = _distinct_texts(right)
    l_texts = _distinct_texts(left)
    right = right.select("dataset", "key", "thash")
    left = left.select("dataset", "key", "thash")

    # Whole-text matches: equal normalised texts, unless the text itself is stock.
    exact = (l_texts.select("thash", l_mult="mult")
             .join(r_texts.select("thash", "nwords", r_mult="mult"), on="thash")
             .filter(pl.col("l_mult").cast(pl.Int64) + pl.col("r_mult") < settings.stock_records)
             .select(lhash="thash", rhash="thash", cover="nwords", start=pl.lit(0, pl.UInt32), span="nwords"))

    # Right n-grams with their positions, and how many right records hold each.
    rg = _ngrams(r_texts.filter(pl.col("nwords") >= n), n, positions=True).rename({"thash": "rhash"})
    r_count = (rg.select("rhash", "g").unique()
               .join(r_texts.select(rhash="thash", mult="mult"), on="rhash")
               .group_by("g").agg(r_count=pl.col("mult").sum()))

    # Left n-grams, a batch of texts at a time, kept only where they occur on the right.
    long_left = l_texts.filter(pl.col("nwords") >= n).select("thash", "norm", "nwords", "mult")
    lg_batches = []
    for start in range(0, long_left.height, BATCH_TEXTS):
        batch = long_left.slice(start, BATCH_TEXTS)
        lg = _ngrams(batch, n, positions=False).join(r_count.select("g"), on="g", how="semi").unique()
        lg_batches.append(lg.join(batch.select("thash", "mult"), on="thash").rename({"thash": "lhash"}))
    l_count = (pl.concat(lg_batches).group_by("g").agg(l_count=pl.col("mult").sum())
               if lg_batches else pl.DataFrame(schema={"g": pl.UInt64, "l_count": pl.UInt32}))

    not_stock = (r_count.join(l_count, on="g", how="left")
                 .filter(pl.col("r_count").cast(pl.Int64) + pl.col("l_count").fill_null(0) < settings.stock_records)
                 .select("g"))
    rg = rg.join(not_stock, on="g", how="semi")

    candidates = [exact.with_columns(exact=pl.lit(True))]
    for lg in lg_batches:
        matches = lg.select("lhash", "g").join(rg, on="g").select("lhash", "rhash", "j").unique()
        pairs = _coverage(matches, n).join(r_texts.select(rhash="thash", nwords="nwords"), on="rhash")
        pairs = pairs.filter(pl.col("cover") >= settings.min_overlap * pl.col("nwords"))
        candidates.append(pairs.select("lhash", "rhash", "cover", "start", "span",
                                       exact=pl.col("lhash") == pl.col("rhash")))
        del matches
    lg_batches.clear()

    # A whole-text match wins over the n-gram figures of the same pair (stock n-grams lower those).
    pairs = (pl.concat([c.with_columns(pl.col("cover", "start", "span").cast(pl.UInt32)) for c in candidates])
             .unique(["lhash", "rhash"], keep="first", maintain_order=True)
             .join(r_texts.select(rhash="thash", nwords="nwords", norm="norm"), on="rhash")
             .with_columns(overlap=pl.when("exact").then(1.0).otherwise(pl.col("cover") / pl.col("nwords")))
             .filter(pl.col("overlap") >= settings.min_overlap))
    pairs = pairs.filter(pl.col("overlap") >= pl.col("overlap").max().over("lhash") - settings.sibling_margin)
    if pairs.is_empty():
        return _empty()
    pairs = pairs.select(
        "lhash", "rhash", "exact",
        text_overlap=pl.col("overlap").cast(pl.Float32),
        longest_span=pl.col("span").cast(pl.Int32),
        matched_text=pl.col("norm").str.split(" ").list.slice(pl.col("start"), pl.col("span")).list.join(" "),
    )
    out = (pairs
           .join(left.rename({"dataset": "train_dataset", "key": "train_key", "thash": "lhash"}), on="lhash")
           .join(right.rename({"dataset": "eval_dataset", "key": "eval_key", "thash": "rhash"}), on="rhash")
           .select(TEXT_LEAK_SCHEMA.names)
           .sort("train_dataset", "train_key", "eval_dataset", "eval_key"))
    return out.to_arrow().cast(TEXT_LEAK_SCHEMA)
