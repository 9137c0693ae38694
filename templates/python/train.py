"""A data-parallel training script on dlrun's runtime (import dlrun): a small regression
model on synthetic data, trained on every rank with averaged gradients, a batch size that
dlrun chooses by goodput, and stoppable and resumable at any step with any number of ranks.

    dlrun local --nproc 2 python3 train.py          train on 2 CPU ranks
    dlrun local --nproc 2:4 python3 train.py        elastic: `dlrun resize JOB 3` while it runs

Replace the data and the model with yours; keep the shape of the loop."""
import sys

import torch
import torch.nn.functional as F

import dlrun

SAMPLES, FEATURES, EPOCHS = 4096, 16, 5


def main():
    ctx = dlrun.init()  # from dlrun's environment; a world of one when run alone

    # The same synthetic data on every rank: y = x . w + noise.
    torch.manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES)
    y = x @ torch.randn(FEATURES, 1) + 0.1 * torch.randn(SAMPLES, 1)
    data = torch.utils.data.TensorDataset(x, y)

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = dlrun.DataParallel(model.to(ctx.device))  # rank 0's weights everywhere; gradients averaged
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # The global batch starts at 128 and goes where goodput is highest; the learning rate
    # follows (AdaScale). dlrun.ElasticDataLoader(data, 128) keeps it fixed.
    loader = dlrun.AdaptiveDataLoader(data, 128, model=model, optimizer=optimizer, max_batch_size=1024)

    # Checkpoints in the run directory dlrun gives the job (none when run alone).
    ckpt = dlrun.Checkpoint([model, optimizer, loader]) if ctx.run_dir else None
    if ckpt:
        ckpt.restore()

    loss_value = 0.0
    for epoch in loader.epochs(EPOCHS):
        for xb, yb in loader:
            loss = F.mse_loss(model(xb.to(ctx.device)), yb.to(ctx.device), reduction="sum") * loader.loss_scale()
            loss.backward()
            loader.observe_loss(loss)  # the noise floor values larger batches by it (docs/adaptive.md)
            optimizer.step()
            optimizer.zero_grad()
            loss_value = loss.item()
            if ctx.stop_requested():  # Ctrl-C, dlrun resize, the scheduler: save and go
                if ckpt:
                    ckpt.save()
                return ctx.exit_code()  # 75: "resume me from the checkpoint"
        if ctx.rank == 0:
            print(f"epoch {epoch + 1}: loss {loss_value:.4f}, batch {loader.global_batch}", flush=True)
        if ckpt:
            ckpt.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
