// optim/optim.h: everything of brisk::optim in one include: the optimizers (SGD, Adam, AdamW,
// RMSprop, Adagrad, NAdam, RAdam, Adamax), the LR schedulers, gradient clipping and the
// gradient scaler.
// Not here: early stopping, which keeps a module's best weights (train/early_stopping.h, still
// brisk::optim::EarlyStopping), and the whole-training-state checkpoint, which also holds a
// data loader's position (train/checkpoint.h): both live above optim and nn.
#pragma once

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamax.h"
#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/nadam.h"
#include "optim/optimizer.h"
#include "optim/radam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
