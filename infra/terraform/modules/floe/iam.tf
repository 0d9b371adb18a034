# IAM, least privilege:
# * the task execution role (used by ECS itself) pulls the image, writes the log
#   streams and reads exactly the secrets injected into the containers;
# * the agent task role (used by Floe's code) reads and writes objects under
#   <bucket>/<object_prefix>/ only, and lists only that prefix; with the journal
#   tier, it may open S3 Express sessions on the journal buckets only;
# * the compactor gets its own role with the same object permissions.

locals {
  # ACCOUNT.dkr.ecr.REGION.amazonaws.com[.cn]/REPO[:TAG|@DIGEST] -> the repository ARN.
  ecr_image = try(regex("^([0-9]{12})\\.dkr\\.ecr\\.([a-z0-9-]+)\\.amazonaws\\.com(?:\\.cn)?/([^:@]+)", var.agent_image), null)
  ecr_repository_arn = (
    local.ecr_image == null ? null
    : "arn:${data.aws_partition.current.partition}:ecr:${local.ecr_image[1]}:${local.ecr_image[0]}:repository/${local.ecr_image[2]}"
  )
}

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    sid     = "EcsTasksAssume"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

# -- execution role -----------------------------------------------------------------

resource "aws_iam_role" "execution" {
  name_prefix        = "${var.name}-exec-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "execution" {
  # Only for images in ECR: the token action has no resource-level permissions
  # (it must be "*"), the layer actions are limited to the image's repository.
  dynamic "statement" {
    for_each = local.ecr_repository_arn == null ? [] : ["token"]
    content {
      sid       = "EcrToken"
      actions   = ["ecr:GetAuthorizationToken"]
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = local.ecr_repository_arn == null ? [] : [local.ecr_repository_arn]
    content {
      sid       = "PullImage"
      actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
      resources = [statement.value]
    }
  }

  statement {
    sid       = "WriteLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.floe.arn}:*"]
  }

  statement {
    sid       = "ReadInjectedSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = values(local.agent_secrets)
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "DecryptSecrets"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "floe-execution"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

# -- object access (agent and compactor task roles) -------------------------------

data "aws_iam_policy_document" "objects" {
  statement {
    sid       = "ObjectsUnderPrefix"
    actions   = ["s3:PutObject", "s3:GetObject", "s3:DeleteObject"]
    resources = ["${aws_s3_bucket.objects.arn}/${local.object_prefix}/*"]
  }

  statement {
    sid       = "ListPrefixOnly"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.objects.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.object_prefix}/*"]
    }
  }

  # The journal's directory buckets (journal.tf): S3 Express authorises every
  # object request (PUT, GET, HEAD, DELETE, LIST) through the session token that
  # CreateSession returns (the SDK creates and refreshes it), so this one action,
  # on exactly these buckets, is all the object access the journal needs.
  dynamic "statement" {
    for_each = local.journal_enabled ? ["journal"] : []
    content {
      sid       = "JournalSessions"
      actions   = ["s3express:CreateSession"]
      resources = [for zone in var.journal_zones : aws_s3_directory_bucket.journal[zone].arn]
    }
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "UseBucketKey"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }
}

resource "aws_iam_role" "agent" {
  name_prefix        = "${var.name}-agent-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "agent_objects" {
  name   = "floe-objects"
  role   = aws_iam_role.agent.id
  policy = data.aws_iam_policy_document.objects.json
}

resource "aws_iam_role" "compactor" {
  count = var.enable_compactor ? 1 : 0

  name_prefix        = "${var.name}-compactor-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "compactor_objects" {
  count = var.enable_compactor ? 1 : 0

  name   = "floe-objects"
  role   = aws_iam_role.compactor[0].id
  policy = data.aws_iam_policy_document.objects.json
}
