// optim/optim.h: everything of brisk::optim in one include: the optimizers (SGD, Adam, AdamW,
// RMSprop, Adagrad), the LR schedulers, gradient clipping and early stopping.
#pragma once

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/checkpoint.h"
#include "optim/clip.h"
#include "optim/early_stopping.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
