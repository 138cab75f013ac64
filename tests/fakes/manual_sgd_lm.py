"""A word-level LSTM language model trained the way pytorch/examples' ``word_language_model/main.py``
trains (pytorch/examples @ 77f55b9): no ``torch.optim`` optimizer, no ``DataLoader``.

What it shares with that script (written here, not copied):
- the corpus is one long id tensor cut into ``--batch_size`` columns (``batchify``, main.py:85-92) and
  fed ``--bptt`` rows at a time (``get_batch``, main.py:136-140): no DataLoader, so the hook counts no
  samples and the sweep credits the batch its template sets;
- each batch: ``zero_grad``, forward, ``loss.backward()``, ``clip_grad_norm_``, then the weights are
  moved by hand, ``p.data.add_(p.grad, alpha=-lr)`` (main.py:175-194): no optimizer step for torch's
  step hook to see;
- every ``--log-interval`` batches a line in the same format (main.py:198-206), ms/batch the interval's
  average::

      | epoch   1 |    10/   38 batches | lr 20.00 | ms/batch  3.21 | loss  6.90 | ppl   992.27

- an evaluation pass with no backward after each epoch (main.py:228);
- the first line's loss and ms/batch cover batches 0..K over K (main.py:167, 199, 204).
Its text is generated (nothing is read or downloaded).

Usage: manual_sgd_lm.py --batch_size B [--bptt T] [--emsize E] [--nhid H] [--epochs N]
                        [--log-interval K] [--tokens N] [--lr X] [--threads T]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
from torch import nn

VOCAB = 200


def corpus(tokens: int) -> torch.Tensor:
    """Seeded word ids with some structure (a repeating phrase, 10 % noise) to learn."""
    gen = torch.Generator().manual_seed(3)
    phrase = torch.randint(0, VOCAB, (37,), generator=gen)
    ids = phrase.repeat(tokens // 37 + 1)[:tokens]
    noise = torch.randint(0, VOCAB, (tokens,), generator=gen)
    return torch.where(torch.rand(tokens, generator=gen) < 0.1, noise, ids)


def columns(ids: torch.Tensor, width: int) -> torch.Tensor:
    """``width`` independent columns of the stream (the remainder dropped), rows are time."""
    rows = ids.numel() // width
    return ids[: rows * width].reshape(width, rows).t().contiguous()


class LSTMModel(nn.Module):
    def __init__(self, emsize: int, nhid: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, emsize)
        self.rnn = nn.LSTM(emsize, nhid, num_layers=2)
        self.head = nn.Linear(nhid, VOCAB)

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, state = self.rnn(self.embed(x), state)
        return torch.log_softmax(self.head(out), dim=-1).reshape(-1, VOCAB), state


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, required=True)
    parser.add_argument("--bptt", type=int, default=8)
    parser.add_argument("--emsize", type=int, default=16)
    parser.add_argument("--nhid", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=6000)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ids = corpus(args.tokens)
    split = int(ids.numel() * 0.9)
    train, valid = columns(ids[:split], args.batch_size), columns(ids[split:], 4)
    model = LSTMModel(args.emsize, args.nhid)
    nll = nn.NLLLoss()
    lr = args.lr
    for epoch in range(1, args.epochs + 1):
        model.train()
        state = (torch.zeros(2, args.batch_size, args.nhid), torch.zeros(2, args.batch_size, args.nhid))
        interval_loss, started = 0.0, time.time()
        for batch, row in enumerate(range(0, train.size(0) - 1, args.bptt)):
            length = min(args.bptt, train.size(0) - 1 - row)
            x, y = train[row : row + length], train[row + 1 : row + 1 + length].reshape(-1)
            model.zero_grad()
            state = (state[0].detach(), state[1].detach())
            out, state = model(x, state)
            loss = nll(out, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)  # the update by hand: torch's step hook never fires
            interval_loss += loss.item()
            if batch % args.log_interval == 0 and batch > 0:
                mean = interval_loss / args.log_interval
                ms = (time.time() - started) * 1000 / args.log_interval
                ppl = math.exp(mean) if mean < 700 else float("inf")
                print(
                    f"| epoch {epoch:3d} | {batch:5d}/{train.size(0) // args.bptt:5d} batches | lr {lr:02.2f} "
                    f"| ms/batch {ms:5.2f} | loss {mean:5.2f} | ppl {ppl:8.2f}",
                    flush=True,
                )
                interval_loss, started = 0.0, time.time()
        model.eval()
        with torch.no_grad():
            vstate = (torch.zeros(2, 4, args.nhid), torch.zeros(2, 4, args.nhid))
            out, _ = model(valid[:-1], vstate)
            print(f"| end of epoch {epoch:3d} | valid loss {nll(out, valid[1:].reshape(-1)).item():5.2f}")
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
